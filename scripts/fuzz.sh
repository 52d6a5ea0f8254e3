#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz/ (tests/fuzz/README.md), as many
# at a time as there are CPUs (FUZZ_PARALLEL overrides).
#
#   scripts/fuzz.sh [SECONDS_PER_FUZZER (default 10)] [NAMES...]
#
# NAMES: proc_stat, snapshot, ... (tests/fuzz/NAME_fuzz.cpp); all without.
# Builds the clang ASan+libFuzzer tree FUZZ_BUILD_DIR (default build-asan;
# scripts/configure-asan.sh configures it when it is missing), runs each
# fuzzer that long on a temporary copy of its corpus and regressions (the source tree is never written), and prints one
# line per fuzzer from libFuzzer's final stats. Crash, timeout and OOM
# inputs are kept under FUZZ_ARTIFACTS (default: a new /tmp directory);
# exits 1 when any fuzzer found one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-10}
shift || true
build=${FUZZ_BUILD_DIR:-build-asan}
[[ $build = /* ]] || build=$root/$build
artifacts=${FUZZ_ARTIFACTS:-$(mktemp -d /tmp/hangtrace-fuzz-artifacts.XXXXXX)}
mkdir -p "$artifacts"

names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  for f in "$root"/tests/fuzz/*_fuzz.cpp; do names+=("$(basename "$f" _fuzz.cpp)"); done
fi

"$root"/scripts/configure-asan.sh "$build"
targets=()
for n in "${names[@]}"; do
  # cupti_records exists only where CUPTI was found.
  if [[ $n = cupti_records ]] && ! grep -q '^HANGTRACE_CUPTI_LIBRARY:.*/' "$build/CMakeCache.txt"; then continue; fi
  targets+=("fuzz_$n")
done
ninja -C "$build" ${FUZZ_JOBS:+-j"$FUZZ_JOBS"} "${targets[@]}" >/dev/null

work=$(mktemp -d /tmp/hangtrace-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
failed=0
# Each fuzzer runs on one CPU: FUZZ_PARALLEL (default: every CPU) at a time,
# each one's lines printed whole, in the order of the targets.
parallel=${FUZZ_PARALLEL:-$(nproc)}
run_fuzzer() {
  local t=$1 n corpus d log rc last cov ft found
  n=${t#fuzz_}
  corpus=$work/$n
  mkdir -p "$corpus"
  for d in corpus regressions; do
    [[ -d $root/tests/fuzz/$d/$n ]] && find "$root/tests/fuzz/$d/$n" -type f ! -name '.*' -exec cp -t "$corpus" {} +
  done
  log=$work/$n.log
  rc=0
  "$build/fuzz/$t" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$artifacts/$n-" "$corpus" >"$log" 2>&1 || rc=$?
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  found=$(find "$artifacts" -maxdepth 1 -name "$n-*" -type f | wc -l)
  printf '%-16s %12s %9s %8s %7s %7s %8s\n' "$n" "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
    "$(find "$corpus" -type f | wc -l)" "${cov:-?}" "${ft:-?}" "$found"
  if [[ $rc -ne 0 || $found -ne 0 ]]; then
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -3 | sed 's/^/    /' || true
    find "$artifacts" -maxdepth 1 -name "$n-*" -type f | sed 's/^/    input: /'
    [[ $rc -ne 0 ]] && cp "$log" "$artifacts/$n.log" && echo "    log: $artifacts/$n.log"
    return 1
  fi
  return 0
}

printf '%-16s %12s %9s %8s %7s %7s %8s\n' fuzzer executions exec/s corpus cov ft crashes
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  n=${t#fuzz_}
  { if run_fuzzer "$t"; then echo 0 >"$work/$n.rc"; else echo 1 >"$work/$n.rc"; fi; } >"$work/$n.row" 2>&1 &
done
wait
for t in "${targets[@]}"; do
  n=${t#fuzz_}
  cat "$work/$n.row"
  [[ $(cat "$work/$n.rc" 2>/dev/null) == 0 ]] || failed=1
done
exit "$failed"
