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
# -O0 -g1: a sanitized build compiles in about a third of the time of -O2 -g
# (-O1 takes 1.7 times as long as -O0 here) and still gives every report its
# file and line; unoptimized, no access is optimized away from the checks.
# The fuzzers run about half as fast as at -O1: CI runs them briefly.
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O0 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1" \
  -DHANGTRACE_BUILD_TESTS=ON -DHANGTRACE_SANITIZE=ON -DHANGTRACE_BUILD_FUZZERS=ON "${launcher[@]}" >/dev/null
