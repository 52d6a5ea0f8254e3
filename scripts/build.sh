#!/usr/bin/env bash
# Configures and builds hangtrace into ./build (BUILD_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build_dir" -j"$(nproc)"
