#!/usr/bin/env bash
# Configures and builds hangtrace into ./build (BUILD_DIR overrides).
#
#   scripts/build.sh          everything: the tool, the man page and every test
#   scripts/build.sh demo     only what `hangtrace demo` runs: the hangtrace
#                             binary and the BPF skeletons compiled into it (no
#                             tests, so no GoogleTest needed to configure)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
case ${1:-all} in
  all) tests=ON targets=() ;;
  demo) tests=OFF targets=(hangtrace) ;;
  *) echo "usage: $0 [demo|all]" >&2; exit 2 ;;
esac
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHANGTRACE_BUILD_TESTS=$tests >/dev/null
ninja -C "$build_dir" -j"$(nproc)" "${targets[@]}"
