#!/usr/bin/env bash
# Benchmark (not a test): how long does each tool take to look at a hung
# PyTorch job, and does what it prints name the cause?
#
# Starts a hung job (scripts/bench_hung_job.py), waits for its READY line,
# then times side by side, one tool after the other, RUNS times each:
#   hangtrace --pid ROOT --json /dev/null                  (also its max RSS)
#   gdb -p PID -batch -ex 'thread apply all bt'            (one process)
#   gdb ... for every process of the job, one after the other
#   timeout 3 strace -f -p ROOT                            (attaches, then waits)
# and prints the median times (and ranges), the ratio to hangtrace, what each
# printed, hangtrace's verdict line and where its time went (its -vvv timings).
#
# The jobs (BENCH_SHAPE):
#   job   (default) the bundled hung job (scripts/demo_hung_job.py: a
#         DataLoader whose two forked workers inherited a held lock), padded
#         with parked threads to BENCH_THREADS (40; 0: the demo as it is) in
#         3 processes. ROOT is its main process, gdb's one process too.
#   node  a node-sized job shaped like torchrun: a launcher (ROOT) that waits
#         on BENCH_RANKS (8) ranks of BENCH_RANK_THREADS (120) threads, each
#         the demo's hang with BENCH_WORKERS (8) forked DataLoader workers of
#         BENCH_WORKER_THREADS (2) threads: 73 processes, ~1,100 threads by
#         default. gdb's one process is rank 0.
# BENCH_SCALE="10 120 480" (node shape): instead of the above, one node job per
# BENCH_RANK_THREADS value, hangtrace alone: how its time and memory grow.
#
# Env: HANGTRACE_BIN (default ./build/hangtrace), PYTHON (/usr/bin/python3),
#      RUNS (5: hangtrace's runs), PEER_RUNS (gdb's and strace's: RUNS, or 1
#      in the node shape, where gdb takes minutes), BENCH_PEERS (1; 0 times
#      hangtrace alone). Needs root (ptrace, BPF), gdb, strace, GNU time.
set -euo pipefail

HANGTRACE_BIN=${HANGTRACE_BIN:-./build/hangtrace}
PYTHON=${PYTHON:-/usr/bin/python3}
RUNS=${RUNS:-5}
BENCH_SHAPE=${BENCH_SHAPE:-job}
BENCH_THREADS=${BENCH_THREADS:-40}
BENCH_PEERS=${BENCH_PEERS:-1}
BENCH_SCALE=${BENCH_SCALE:-}
case $BENCH_SHAPE in
  job) PEER_RUNS=${PEER_RUNS:-$RUNS} ;;
  node) PEER_RUNS=${PEER_RUNS:-1} ;;
  *) echo "bench_snapshot: BENCH_SHAPE is job or node, not $BENCH_SHAPE" >&2; exit 1 ;;
esac
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEMO=$HERE/demo_hung_job.py
JOB=$HERE/bench_hung_job.py

die() { echo "bench_snapshot: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (ptrace and BPF)"
[[ -x $HANGTRACE_BIN ]] || die "no hangtrace binary at $HANGTRACE_BIN (set HANGTRACE_BIN)"
[[ -x /usr/bin/time ]] || die "needs GNU time (/usr/bin/time) for the max RSS"
for tool in gdb strace timeout; do command -v $tool >/dev/null || die "needs $tool"; done
"$PYTHON" -c 'import torch' 2>/dev/null || die "needs torch in $PYTHON"
[[ -z $BENCH_SCALE || $BENCH_SHAPE == node ]] || die "BENCH_SCALE needs BENCH_SHAPE=node"

tmp=$(mktemp -d /tmp/hangtrace-bench.XXXXXX)
job_pid=
main=
workers=
stop_job() {
  if [[ -n $job_pid ]]; then
    local all="$job_pid ${main:-} ${workers:-}"
    kill -KILL -- "-$job_pid" 2>/dev/null || true
    [[ -n $main ]] && { kill -KILL -- "-$main" 2>/dev/null || true; }
    # shellcheck disable=SC2086  # a list of pids
    kill -KILL $all 2>/dev/null || true
    wait "$job_pid" 2>/dev/null || true
  fi
  job_pid='' main='' workers=''
}
cleanup() {
  stop_job
  rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck source=scripts/demo_job.sh
source "$HERE/demo_job.sh"
export BENCH_THREADS BENCH_RANKS BENCH_RANK_THREADS BENCH_WORKERS BENCH_WORKER_THREADS  # read by the job

# start_job: the job of BENCH_SHAPE, stuck (its READY line seen); sets main
# (ROOT), workers (every other process), threads, processes and one (gdb's).
start_job() {
  if [[ $BENCH_SHAPE == node ]]; then
    start_demo_job "$PYTHON" -u "$JOB" node "$DEMO"
    one=$(sed -n 's/.*ranks=\([0-9]*\).*/\1/p' "$tmp/job.out")
  elif ((BENCH_THREADS > 0)); then
    start_demo_job "$PYTHON" -u "$JOB" job "$DEMO"
    one=$main
  else
    start_demo_job "$PYTHON" -u "$DEMO"
    one=$main
  fi
  processes=$((1 + $(wc -w <<<"$workers")))
}

# time_rss NAME RUNS CMD...: median, min, max wall s, median CPU s, max RSS KiB
# of RUNS runs into wall[NAME], range[NAME], cpu[NAME] and rss[NAME].
declare -A wall range cpu rss
time_rss() {
  local name=$1 runs=$2 med lo hi c r
  shift 2
  read -r med lo hi c r < <("$PYTHON" "$HERE/bench_lib.py" time-rss "$runs" "$@")
  wall[$name]=$med
  range[$name]=$(printf '%.2f-%.2f' "$lo" "$hi")
  cpu[$name]=$c
  rss[$name]=$r
}

# phases: where one hangtrace run's time went, from its -vvv timings, and
# what the timed runs spent besides the snapshot.
phases() {
  local snap
  "$HANGTRACE_BIN" --pid "$main" --json /dev/null -vvv >/dev/null 2>"$tmp/phases.err" || true
  grep '^hangtrace: ' "$tmp/phases.err" | sed 's/^hangtrace: /  | /'
  snap=$(sed -n 's/^hangtrace: snapshot took \([0-9.]*\) s$/\1/p' "$tmp/phases.err")
  [[ -n $snap ]] && awk -v m="${wall[hangtrace]}" -v s="$snap" 'BEGIN {
    printf "  | the rest of the median run: %.3f s (start, BPF setup, diagnosis, text and JSON report, exit)\n", m - s }'
}

host_line() { echo "host: $(nproc) CPUs, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"; }

# ---- BENCH_SCALE: hangtrace alone, growing node jobs ---------------------------------
if [[ -n $BENCH_SCALE ]]; then
  host_line
  echo "$RUNS runs each, hangtrace --pid ROOT --json /dev/null"
  echo
  printf '%-12s %9s %7s %10s %11s %7s %8s %9s\n' threads/rank processes threads median_s range_s cpu_s rss_MiB "ms/thread"
  for n in $BENCH_SCALE; do
    export BENCH_RANK_THREADS=$n
    start_job
    time_rss hangtrace "$RUNS" "$HANGTRACE_BIN" --pid "$main" --json /dev/null
    printf '%-12s %9s %7s %10.3f %11s %7.2f %8.1f %9.2f\n' "$n" "$processes" "$threads" "${wall[hangtrace]}" \
      "${range[hangtrace]}" "${cpu[hangtrace]}" "$(awk -v k="${rss[hangtrace]}" 'BEGIN { print k / 1024 }')" \
      "$(awk -v s="${wall[hangtrace]}" -v t="$threads" 'BEGIN { print 1000 * s / t }')"
    stop_job
  done
  exit 0
fi

# ---- one job, side by side ------------------------------------------------------------
start_job
echo "job (BENCH_SHAPE=$BENCH_SHAPE): root=$main, $processes processes, $threads threads"
host_line
if [[ $BENCH_PEERS != 0 ]]; then
  echo "hangtrace: $RUNS runs; gdb and strace: $PEER_RUNS run(s) each"
else
  echo "hangtrace: $RUNS runs; no peers (BENCH_PEERS=0)"
fi
echo

cat >"$tmp/gdb_all.sh" <<EOF
for p in $main $workers; do gdb -p \$p -batch -ex 'thread apply all bt'; done
EOF
one_name="gdb (main)"
[[ $BENCH_SHAPE == node ]] && one_name="gdb (rank 0)"
names=(hangtrace)
time_rss hangtrace "$RUNS" "$HANGTRACE_BIN" --pid "$main" --json /dev/null
if [[ $BENCH_PEERS != 0 ]]; then
  names+=("$one_name" "gdb (all procs)" "strace -f (3 s)")
  time_rss "$one_name" "$PEER_RUNS" gdb -p "$one" -batch -ex 'thread apply all bt'
  time_rss "gdb (all procs)" "$PEER_RUNS" bash "$tmp/gdb_all.sh"
  time_rss "strace -f (3 s)" "$PEER_RUNS" timeout 3 strace -f -p "$main"
fi

# ---- what each said -------------------------------------------------------------------
"$HANGTRACE_BIN" --pid "$main" --json - >"$tmp/hangtrace.json" 2>"$tmp/hangtrace.err" || true
"$HANGTRACE_BIN" --pid "$main" >"$tmp/hangtrace.txt" 2>&1 || true
said_hangtrace=$("$PYTHON" - "$tmp/hangtrace.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("no: no report (%s)" % e.__class__.__name__); sys.exit()
locks = [f for f in r.get("findings", []) if f.get("kind") == "orphaned-lock"]
if len(locks) == 1:
    print("yes: orphaned-lock (%s), pids %s" % (locks[0].get("confidence"), locks[0].get("pids")))
elif locks:
    print("yes: %d orphaned-lock findings (%s), one per process whose workers are stuck, %d pids in all"
          % (len(locks), "/".join(sorted({f.get("confidence") for f in locks})),
             sum(len(f.get("pids", [])) for f in locks)))
else:
    print("no: verdict %s, findings %s" % (r.get("verdict", {}).get("status"),
                                          [f.get("kind") for f in r.get("findings", [])] or "none"))
EOF
)
lines=("$(wc -l <"$tmp/hangtrace.txt")")
said=("$said_hangtrace")
if [[ $BENCH_PEERS != 0 ]]; then
  gdb -p "$one" -batch -ex 'thread apply all bt' >"$tmp/gdb_one.out" 2>&1 || true
  bash "$tmp/gdb_all.sh" >"$tmp/gdb_all.out" 2>&1 || true
  timeout 3 strace -f -p "$main" >"$tmp/strace.out" 2>&1 || true
  lock_frames() { grep -c 'PyThread_acquire_lock' "$1" || true; }
  stacks() { grep -c '^Thread ' "$1" || true; }
  others="workers not shown"
  [[ $BENCH_SHAPE == node ]] && others="the launcher, the other ranks and all workers not shown"
  said+=("no: $(stacks "$tmp/gdb_one.out") C stacks, $(lock_frames "$tmp/gdb_one.out") in PyThread_acquire_lock; $others")
  said+=("partly: $(stacks "$tmp/gdb_all.out") C stacks, $(lock_frames "$tmp/gdb_all.out") in PyThread_acquire_lock; which lock, who holds it, and the fork are not shown")
  if [[ $BENCH_SHAPE == node ]]; then
    said+=("no: $(wc -l <"$tmp/strace.out") lines, the launcher's wait4; ranks and workers not attached")
  else
    said+=("no: $(wc -l <"$tmp/strace.out") lines, $(grep -c 'futex(' "$tmp/strace.out" || true) futex waits of main's threads, $(grep -c 'restart_syscall' "$tmp/strace.out" || true) restart_syscall; workers not attached")
  fi
  lines+=("$(wc -l <"$tmp/gdb_one.out")" "$(wc -l <"$tmp/gdb_all.out")" "$(wc -l <"$tmp/strace.out")")
fi

echo "timer: scripts/bench_lib.py time-rss (wall around GNU time; max RSS = its %M)"
printf '%-17s %9s %11s %11s %8s %7s  %s\n' tool median_s range_s "x hangtrace" rss_MiB lines "named the cause?"
base=${wall[hangtrace]}
for i in "${!names[@]}"; do
  n=${names[$i]}
  ratio=$(awk -v a="${wall[$n]}" -v b="$base" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "-" }')
  mib=$(awk -v k="${rss[$n]}" 'BEGIN { printf "%.1f", k / 1024 }')
  [[ $n == hangtrace ]] || mib=-  # the shell around gdb's loop, not gdb
  printf '%-17s %9.3f %11s %11s %8s %7s  %s\n' "$n" "${wall[$n]}" "${range[$n]}" "$ratio" "$mib" "${lines[$i]}" \
    "${said[$i]}"
done
echo "(lines: what a person reads -- hangtrace's text report, gdb's backtraces, strace's trace)"
echo
echo "hangtrace said:"
grep -m1 '^VERDICT' "$tmp/hangtrace.txt" | sed 's/^/  | /' || true
echo "where hangtrace's time went (one -vvv run):"
phases
if [[ $BENCH_PEERS != 0 ]]; then
  echo "strace printed:"
  sed 's/^/  | /' "$tmp/strace.out" | head -20
fi
