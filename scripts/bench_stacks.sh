#!/usr/bin/env bash
# Benchmark (not a test): native stack capture + symbolization of a hung
# PyTorch job, first capture vs second in one hangtrace process.
#
# Starts the bundled hung job (scripts/demo_hung_job.py: a DataLoader whose
# two forked workers inherited a held lock; 3 processes, libtorch mapped in
# each), waits for its READY line, then runs bench/stacks/bench_stacks.cpp
# (CMake target bench_stacks, built here), which in ONE process:
#   - twice: the BPF task snapshot of the 3 processes + unwinding and
#     symbolizing every blocked thread, sharing one NativeStackCache:
#     first_ms, second_ms, ratio, frames, and where the time went;
#   - twice: the whole collector (collect_snapshot, no progress window) on a
#     fresh cache: collect_first_ms, collect_second_ms.
# Then times the end-to-end CLI, `hangtrace --pid MAIN --json -` (wall, RUNS
# runs; each a fresh process, so always a first capture).
#
# Env: BUILD_DIR (./build), PYTHON (/usr/bin/python3), RUNS (3).
# Needs root (BPF, process_vm_readv).
set -euo pipefail

BUILD_DIR=${BUILD_DIR:-./build}
PYTHON=${PYTHON:-/usr/bin/python3}
RUNS=${RUNS:-3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEMO=$HERE/demo_hung_job.py

die() { echo "bench_stacks: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (BPF, process_vm_readv)"
[[ -f $BUILD_DIR/build.ninja || -f $BUILD_DIR/Makefile ]] || die "no build at $BUILD_DIR (set BUILD_DIR)"
"$PYTHON" -c 'import torch' 2>/dev/null || die "needs torch in $PYTHON"
cmake --build "$BUILD_DIR" --target bench_stacks hangtrace -- -j2 >/dev/null || die "failed to build bench_stacks"

tmp=$(mktemp -d /tmp/hangtrace-bench-stacks.XXXXXX)
job_pid=
cleanup() {
  if [[ -n $job_pid ]]; then
    kill -KILL -- "-$job_pid" 2>/dev/null || true
    wait "$job_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck source=scripts/demo_job.sh
source "$HERE/demo_job.sh"
start_demo_job "$PYTHON" -u "$DEMO"
echo "job: main=$main workers=$workers, $threads threads; host: $(nproc) CPUs, kernel $(uname -r)"

# shellcheck disable=SC2086  # a list of pids
"$BUILD_DIR/bench_stacks" $main $workers | tee "$tmp/bench.out"

"$PYTHON" - "$BUILD_DIR/hangtrace" "$main" "$RUNS" <<'PY'
import json, statistics, subprocess, sys, time
binary, pid, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
walls, frames = [], 0
for _ in range(runs):
    t0 = time.monotonic()
    out = subprocess.run([binary, "--pid", pid, "--json", "-"], capture_output=True, text=True)
    walls.append((time.monotonic() - t0) * 1000)
    if out.returncode not in (0, 1, 2, 3):
        sys.exit("hangtrace failed (%d): %s" % (out.returncode, out.stderr))
print("e2e_wall_ms median=%.0f min=%.0f max=%.0f (hangtrace --pid %s --json -, %d runs)"
      % (statistics.median(walls), min(walls), max(walls), pid, runs))
PY
