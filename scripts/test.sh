#!/usr/bin/env bash
# Fresh machine -> every test built and run: unit, integration (real BPF on the
# running kernel) and scenarios (real PyTorch jobs). Needs root for the last two;
# without root or BTF they skip with the reason. Then the unit and integration
# suites again under ASan+UBSan and each fuzzer for a few seconds
# (scripts/sanitize.sh; HANGTRACE_SKIP_SANITIZE=1 leaves that out).
#
#   scripts/test.sh [ctest args for the release suite...]
#
# Tests run side by side (ctest -j HANGTRACE_TEST_JOBS, default 4: most of a
# test's time is spent waiting for a hang to develop; tests that must not
# overlap say so with RESOURCE_LOCK in tests/CMakeLists.txt). The sanitized
# tree builds, at the lowest CPU priority, while the release suite runs. At
# the end: how long each stage took and the ten slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ci_stages.sh
jobs=${HANGTRACE_TEST_JOBS:-4}
sanitize=$((${HANGTRACE_SKIP_SANITIZE:-0} != 1))
asan_build_pid=
run_start=$SECONDS

# The sanitized tree builds at the lowest priority only while the release
# suite runs; then at the ordinary one (as root: raising a priority needs
# CAP_SYS_NICE), else a busy machine's other work would starve it.
renice_tree() {
  local child
  renice -n 0 -p "$1" >/dev/null 2>&1 || true
  for child in $(pgrep -P "$1"); do renice_tree "$child"; done
}

kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

finish() {
  local rc=$?
  if [[ -n $asan_build_pid ]]; then  # the suite failed: the build beside it is of no use now
    kill_tree "$asan_build_pid"
    wait "$asan_build_pid" 2>/dev/null || true
  fi
  print_stages || true
  echo "== whole run: $((SECONDS - run_start)) s, exit $rc"
  exit "$rc"  # the run's own status, whatever the summary did
}
trap finish EXIT

stage install scripts/install-deps.sh
stage build scripts/build.sh
if ((sanitize)); then
  asan_log=$(dirname "$HANGTRACE_STAGE_LOG")/asan-build.log
  stage "sanitizer build (beside the suite)" \
    nice -n 19 bash -c 'scripts/configure-asan.sh "$1" && ninja -C "$1" -j"$(nproc)"' _ "${SANITIZE_BUILD_DIR:-build-asan}" \
    >"$asan_log" 2>&1 &
  asan_build_pid=$!
fi
stage "release suite (ctest -j$jobs)" run_ctest release "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -j"$jobs" "$@"
if ((sanitize)); then
  renice_tree "$asan_build_pid"
  rc=0
  wait "$asan_build_pid" || rc=$?
  asan_build_pid=
  if ((rc != 0)); then
    echo "test.sh: the sanitizer build failed:" >&2
    tail -40 "$asan_log" >&2
    exit "$rc"
  fi
  scripts/sanitize.sh 5
fi
