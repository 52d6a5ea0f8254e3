#!/usr/bin/env bash
# Configures and builds hangtrace into ./build (BUILD_DIR overrides).
#
#   scripts/build.sh          everything: the tool, the man page and every test
#   scripts/build.sh demo     only what `hangtrace demo` runs: the hangtrace
#                             binary and the BPF skeletons compiled into it; a
#                             new build tree is configured without the tests (so
#                             no GoogleTest is needed), an existing one as it is
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
case ${1:-all} in
  all) options=(-DHANGTRACE_BUILD_TESTS=ON) targets=() ;;
  demo)
    options=() targets=(hangtrace)
    [[ -f $build_dir/CMakeCache.txt ]] || options=(-DHANGTRACE_BUILD_TESTS=OFF) ;;
  *) echo "usage: $0 [demo|all]" >&2; exit 2 ;;
esac
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${options[@]}" >/dev/null
ninja -C "$build_dir" -j"$(nproc)" "${targets[@]}"
