#!/usr/bin/env bash
# Configures the clang ASan+UBSan+libFuzzer tree DIR (default build-asan) when
# it is not configured yet: the one tree scripts/sanitize.sh and
# scripts/fuzz.sh both use.
#
#   scripts/configure-asan.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
[[ -f $build/CMakeCache.txt ]] && exit 0
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# -O1 -g1: a sanitized build compiles in about half the time of -O2 -g and
# still gives every report its file and line.
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DHANGTRACE_BUILD_TESTS=ON -DHANGTRACE_SANITIZE=ON -DHANGTRACE_BUILD_FUZZERS=ON "${launcher[@]}" >/dev/null
