#!/usr/bin/env bash
# Builds the Debian package: hangtrace_<version>_<arch>.deb (CPack's DEB
# generator, CMakeLists.txt) into $BUILD_DIR/package (PACKAGE_DIR overrides),
# and prints its path on the last line. Builds what the package ships (the
# binary, the CUPTI injection library when CUPTI is there, the man page) in an
# existing build tree, as configured, or in a new one without the tests.
#
#   scripts/install-deps.sh && scripts/package.sh
#   sudo apt install ./build/package/hangtrace_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
package_dir=${PACKAGE_DIR:-$build_dir/package}
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHANGTRACE_BUILD_TESTS=OFF >/dev/null
fi
ninja -C "$build_dir" -j"$(nproc)" hangtrace_dist >/dev/null
mkdir -p "$package_dir"
rm -f "$package_dir"/hangtrace_*.deb
cpack --config "$build_dir/CPackConfig.cmake" -G DEB -B "$package_dir" >"$package_dir/cpack.log" 2>&1 || {
  cat "$package_dir/cpack.log" >&2
  exit 1
}
debs=("$package_dir"/hangtrace_*.deb)
[[ -f ${debs[0]} ]] || { echo "package.sh: cpack wrote no .deb" >&2; cat "$package_dir/cpack.log" >&2; exit 1; }
dpkg-deb --field "${debs[0]}" Package Version Architecture Depends >&2
echo "${debs[0]}"
