#!/usr/bin/env bash
# Fresh machine -> every test built and run: unit, integration (real BPF on the
# running kernel) and scenarios (real PyTorch jobs). Needs root for the last two;
# without root or BTF they skip with the reason. Then the unit and integration
# suites again under ASan+UBSan and each fuzzer for a few seconds
# (scripts/sanitize.sh; HANGTRACE_SKIP_SANITIZE=1 leaves that out).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 600 -j1 "$@")
[[ ${HANGTRACE_SKIP_SANITIZE:-0} = 1 ]] || scripts/sanitize.sh 5
