#!/usr/bin/env bash
# The unit and integration suites and every fuzzer, under AddressSanitizer and
# UBSan: a clang build in ./build-asan (SANITIZE_BUILD_DIR overrides) with
# HANGTRACE_SANITIZE and HANGTRACE_BUILD_FUZZERS, so the same tree holds the
# sanitized hangtrace and the libFuzzer targets.
#
#   scripts/sanitize.sh [FUZZ_SECONDS (default 5)] [ctest args...]
#
# hangtrace's own exit status says what it found (0, 1, 2), so a sanitizer
# report is never judged by an exit code: every report goes to a file under
# a new directory (ASan's and UBSan's log_path) and any file there fails the
# run, printed. Then scripts/fuzz.sh runs each fuzzer FUZZ_SECONDS on its
# corpus and regressions. No suppressions.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${SANITIZE_BUILD_DIR:-build-asan}
fuzz_seconds=${1:-5}
shift || true

# Run alone, it prints its own stages at the end (scripts/test.sh prints the whole run's).
[[ -n ${HANGTRACE_STAGE_LOG:-} ]] || trap print_stages EXIT
source scripts/ci_stages.sh
jobs=${HANGTRACE_TEST_JOBS:-4}

build_asan() { scripts/configure-asan.sh "$build" && ninja -C "$build" -j"$(nproc)"; }
stage "sanitizer build" build_asan

reports=$(mktemp -d /tmp/hangtrace-sanitizer-reports.XXXXXX)
chmod 0755 "$reports"  # tests that drop privileges run hangtrace as another user
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="log_path=$reports/lsan"
rc=0
# The scenarios (real PyTorch jobs, minutes each) run on the release build in
# scripts/test.sh; here what exercises hangtrace's own code most per second,
# with the few scenarios labelled scenario_sanitized (tests/CMakeLists.txt).
stage "sanitized suites (ctest -j$jobs)" run_ctest sanitized "$build" --output-on-failure --timeout 900 -j"$jobs" \
  -L 'unit|requires_bpf' -LE '^scenario$' "$@" || rc=$?
unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS

found=$(find "$reports" -type f | wc -l)
echo "sanitizer reports: $found (in $reports)"
if [[ $found -ne 0 ]]; then
  for f in "$reports"/*; do
    echo "== $f"
    head -40 "$f"
  done
  rc=1
fi

echo "fuzzers, ${fuzz_seconds} s each:"
stage "fuzzers (${fuzz_seconds} s each)" env FUZZ_BUILD_DIR="$root/$build" scripts/fuzz.sh "$fuzz_seconds" || rc=1
exit "$rc"
