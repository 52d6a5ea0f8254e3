#!/usr/bin/env bash
# Benchmark (not a test): how long does each tool take to look at a hung
# PyTorch job, and does what it prints name the cause?
#
# Starts the bundled hung job (scripts/demo_hung_job.py: a DataLoader whose
# two forked workers inherited a held lock), by default padded with parked
# threads to ~40 threads in 3 processes, waits for its READY line, then times
# side by side, in one hyperfine run (or a date +%s%N loop without hyperfine):
#   hangtrace --pid MAIN --json /dev/null
#   gdb -p MAIN -batch -ex 'thread apply all bt'           (main process only)
#   gdb ... for MAIN and each worker, one after the other  (the whole job)
#   timeout 3 strace -f -p MAIN                            (attaches, then waits)
# and prints the median times, the ratio to hangtrace, and what each printed.
#
# Env: HANGTRACE_BIN (default ./build/hangtrace), PYTHON (/usr/bin/python3),
#      RUNS (5), BENCH_THREADS (40; 0 runs the demo job as it is).
# Needs root (ptrace, BPF).
set -euo pipefail

HANGTRACE_BIN=${HANGTRACE_BIN:-./build/hangtrace}
PYTHON=${PYTHON:-/usr/bin/python3}
RUNS=${RUNS:-5}
BENCH_THREADS=${BENCH_THREADS:-40}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEMO=$HERE/demo_hung_job.py

die() { echo "bench_snapshot: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (ptrace and BPF)"
[[ -x $HANGTRACE_BIN ]] || die "no hangtrace binary at $HANGTRACE_BIN (set HANGTRACE_BIN)"
for tool in gdb strace timeout; do command -v $tool >/dev/null || die "needs $tool"; done
"$PYTHON" -c 'import torch' 2>/dev/null || die "needs torch in $PYTHON"

tmp=$(mktemp -d /tmp/hangtrace-bench.XXXXXX)
job_pid=
main=
cleanup() {
  if [[ -n $job_pid ]]; then
    local all="$job_pid ${main:-} ${workers:-}"
    kill -KILL -- "-$job_pid" 2>/dev/null || true
    [[ -n $main ]] && { kill -KILL -- "-$main" 2>/dev/null || true; }
    # shellcheck disable=SC2086  # a list of pids
    kill -KILL $all 2>/dev/null || true
    wait "$job_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# ---- the job -------------------------------------------------------------------
# The padded variant parks threads on an Event in the main process (before the
# workers fork) and in each worker (worker_init_fn), the way I/O, logging and
# prefetch threads sit idle in real jobs, then runs the demo unchanged.
cat >"$tmp/padded_job.py" <<'EOF'
import os, runpy, sys, threading
import torch.utils.data as tud

total = int(os.environ["BENCH_THREADS"])
per_worker = max(0, (total - 6) // 3)        # 3 processes; the demo has ~6 of its own
in_main = max(0, total - 6 - 2 * per_worker)
parked = threading.Event()

def park(n, prefix):
    for i in range(n):
        threading.Thread(target=parked.wait, name="%s-%d" % (prefix, i), daemon=True).start()

park(in_main, "io")
original_init = tud.DataLoader.__init__
def padded_init(self, *args, **kwargs):
    kwargs.setdefault("worker_init_fn", lambda worker_id: park(per_worker, "prefetch"))
    original_init(self, *args, **kwargs)
tud.DataLoader.__init__ = padded_init

demo = sys.argv[1]
sys.argv = [demo]
runpy.run_path(demo, run_name="__main__")
EOF

if ((BENCH_THREADS > 0)); then
  job=("$PYTHON" -u "$tmp/padded_job.py" "$DEMO")
else
  job=("$PYTHON" -u "$DEMO")
fi
# shellcheck source=scripts/demo_job.sh
source "$HERE/demo_job.sh"
export BENCH_THREADS  # read by the job
start_demo_job "${job[@]}"
echo "job: main=$main workers=$workers, $((1 + $(wc -w <<<"$workers"))) processes, $threads threads"
echo "host: $(nproc) CPUs, kernel $(uname -r); $RUNS runs each"
echo

# ---- the commands ----------------------------------------------------------------
cat >"$tmp/hangtrace.sh" <<EOF
exec "$HANGTRACE_BIN" --pid $main --json /dev/null
EOF
cat >"$tmp/gdb_main.sh" <<EOF
exec gdb -p $main -batch -ex 'thread apply all bt'
EOF
cat >"$tmp/gdb_all.sh" <<EOF
for p in $main $workers; do gdb -p \$p -batch -ex 'thread apply all bt'; done
EOF
cat >"$tmp/strace.sh" <<EOF
timeout 3 strace -f -p $main
exit 0
EOF
names=(hangtrace "gdb (main)" "gdb (all procs)" "strace -f (3 s)")
scripts=(hangtrace gdb_main gdb_all strace)

declare -A median
if command -v hyperfine >/dev/null; then
  args=()
  for i in "${!names[@]}"; do args+=(-n "${names[$i]}" "bash $tmp/${scripts[$i]}.sh >/dev/null 2>&1"); done
  hyperfine --runs "$RUNS" --ignore-failure --style basic --export-json "$tmp/hyperfine.json" "${args[@]}" >&2
  while IFS=$'\t' read -r name med; do median[$name]=$med; done < <(
    "$PYTHON" -c 'import json,sys
for r in json.load(open(sys.argv[1]))["results"]: print("%s\t%.6f" % (r["command"], r["median"]))' "$tmp/hyperfine.json")
  timer="hyperfine $(hyperfine --version | awk '{print $2}')"
else
  for i in "${!names[@]}"; do
    samples=()
    for _ in $(seq 1 "$RUNS"); do
      t0=$(date +%s%N)
      bash "$tmp/${scripts[$i]}.sh" >/dev/null 2>&1 || true
      samples+=($(( $(date +%s%N) - t0 )))
    done
    med=$(printf '%s\n' "${samples[@]}" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.6f", m/1e9}')
    median[${names[$i]}]=$med
  done
  timer="bash loop, date +%s%N"
fi

# ---- what each one said ------------------------------------------------------------
"$HANGTRACE_BIN" --pid "$main" --json - >"$tmp/hangtrace.json" 2>"$tmp/hangtrace.err" || true
"$HANGTRACE_BIN" --pid "$main" >"$tmp/hangtrace.txt" 2>&1 || true
bash "$tmp/gdb_all.sh" >"$tmp/gdb_all.out" 2>&1 || true
bash "$tmp/gdb_main.sh" >"$tmp/gdb_main.out" 2>&1 || true
bash "$tmp/strace.sh" >"$tmp/strace.out" 2>&1 || true

said_hangtrace=$("$PYTHON" - "$tmp/hangtrace.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("no: no report (%s)" % e.__class__.__name__); sys.exit()
kinds = [f.get("kind") for f in r.get("findings", [])]
if "orphaned-lock" in kinds:
    f = next(f for f in r["findings"] if f["kind"] == "orphaned-lock")
    print("yes: orphaned-lock (%s), pids %s" % (f.get("confidence"), f.get("pids")))
else:
    print("no: verdict %s, findings %s" % (r.get("verdict", {}).get("status"), kinds or "none"))
EOF
)
lock_frames() { grep -c 'PyThread_acquire_lock' "$1" || true; }
said_gdb_main="no: $(grep -c '^Thread ' "$tmp/gdb_main.out" || true) C stacks, $(lock_frames "$tmp/gdb_main.out") in PyThread_acquire_lock; workers not shown"
said_gdb_all="partly: $(grep -c '^Thread ' "$tmp/gdb_all.out" || true) C stacks, $(lock_frames "$tmp/gdb_all.out") in PyThread_acquire_lock; which lock, who holds it, and the fork are not shown"
strace_lines=$(wc -l <"$tmp/strace.out")
said_strace="no: $strace_lines lines, $(grep -c 'futex(' "$tmp/strace.out" || true) futex waits of main's threads, $(grep -c 'restart_syscall' "$tmp/strace.out" || true) restart_syscall; workers not attached"

output_lines() {
  case $1 in
    hangtrace) wc -l <"$tmp/hangtrace.txt" ;;   # the text report
    gdb_main) wc -l <"$tmp/gdb_main.out" ;;
    gdb_all) wc -l <"$tmp/gdb_all.out" ;;
    strace) echo "$strace_lines" ;;
  esac
}

echo
echo "timer: $timer"
printf '%-17s %10s %9s %7s  %s\n' tool median_s "x hangtrace" lines "named the cause?"
base=${median[hangtrace]}
for i in "${!names[@]}"; do
  n=${names[$i]}
  case ${scripts[$i]} in
    hangtrace) said=$said_hangtrace ;; gdb_main) said=$said_gdb_main ;;
    gdb_all) said=$said_gdb_all ;; strace) said=$said_strace ;;
  esac
  ratio=$(awk -v a="${median[$n]}" -v b="$base" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "-" }')
  printf '%-17s %10.3f %9s %7s  %s\n' "$n" "${median[$n]}" "$ratio" "$(output_lines "${scripts[$i]}")" "$said"
done
echo "(lines: what a person reads -- hangtrace's text report, gdb's backtraces, strace's trace)"
echo
echo "hangtrace said:"
grep -m1 '^VERDICT' "$tmp/hangtrace.txt" | sed 's/^/  | /' || true
echo "strace printed:"
sed 's/^/  | /' "$tmp/strace.out" | head -20
