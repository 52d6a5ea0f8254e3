#!/usr/bin/env bash
# Benchmark (not a test): what does the on-CPU frame sampler (--sample-hz)
# cost a PyTorch job with ~100 threads, next to perf record?
#
# The job (scripts/bench_sampler_job.py, /usr/bin/python3 + torch): torch's
# intra-op pool (set_num_threads 8), 80 Python threads (4 doing a small tensor
# op every 5 ms, the rest parked on a condition) and a main thread that runs
# STEPS steps of matmuls and a Python loop, timing only those (~3-5 s
# untraced on a 2-vCPU VM). It waits on a FIFO until the tracer is attached.
# Configurations, side by side in one run, interleaved round-robin (each
# round rotates their order), REPS rounds:
#   untraced
#   hangtrace-20     hangtrace --pid P --duration 600 --sample-hz 20 (the
#                    window is ended by SIGINT once the job's loop is done)
#   hangtrace-100    the same at 100 Hz
#   hangtrace-0      the same with --sample-hz 0 (the live window alone: what
#                    the sampler adds is the difference)
#   perf-100         perf record -F 100 -g -p P -o FILE (frame-pointer
#                    call graphs of every thread; perf writes its file as it goes)
# Every tracer is attached before the loop starts: hangtrace once it printed
# "tracing N process(es)", perf once its perf_event fds stopped growing.
# Figures per config (median of REPS): the job's loop time, slowdown vs
# untraced, the tracer's CPU over the loop (/proc/PID/task/*/schedstat, s and
# % of one core), and for hangtrace the samples and unreadable samples of its
# JSON live.cpu_samples.
#
# Env: HANGTRACE_BIN (./build/hangtrace), REPS (5), STEPS (16), TOOLS
#      (comma-separated config names; untraced always runs), KEEP (keep the
#      temp dir). Needs root. perf missing: its row says "not installed".
set -euo pipefail

HANGTRACE_BIN=${HANGTRACE_BIN:-./build/hangtrace}
REPS=${REPS:-5}
STEPS=${STEPS:-16}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "bench_sampler: $*" >&2; exit 1; }
# shellcheck source=scripts/bench_lib.sh
source "$HERE/bench_lib.sh"
[[ $(id -u) -eq 0 ]] || die "needs root (BPF, ptrace, perf events)"
command -v "$PYTHON" >/dev/null || die "needs $PYTHON"
"$PYTHON" -c "import torch" 2>/dev/null || die "needs torch for $PYTHON"
[[ -x $HANGTRACE_BIN ]] || die "no hangtrace binary at $HANGTRACE_BIN (set HANGTRACE_BIN)"

tmp=$(mktemp -d /tmp/hangtrace-bench-sampler.XXXXXX)
cleanup() {
  if [[ -z ${KEEP:-} ]]; then rm -rf "$tmp"; else echo "kept $tmp" >&2; fi
}
trap cleanup EXIT

HANGTRACE_BIN=$(realpath -m "$HANGTRACE_BIN") TMP=$tmp REPS=$REPS STEPS=$STEPS TOOLS=${TOOLS:-} \
  JOB="$HERE/bench_sampler_job.py" PYTHON=$PYTHON BENCH_LIB_DIR=$BENCH_LIB_DIR \
  "$PYTHON" - <<'EOF'
import json, os, signal, subprocess, sys, time
sys.path.insert(0, os.environ["BENCH_LIB_DIR"])
from bench_lib import bpf_links, fmt, have, make_gate, med, open_gate, proc_cpu_ns, read_result

TMP = os.environ["TMP"]
HT = os.environ["HANGTRACE_BIN"]
REPS = int(os.environ["REPS"])
STEPS = int(os.environ["STEPS"])
JOB = [os.environ["PYTHON"], os.environ["JOB"], "--steps", str(STEPS)]
CONFIGS = [
    ("untraced", None),
    ("hangtrace-0", [HT, "--duration", "600", "--sample-hz", "0", "--json", "{json}", "--pid", "{pid}"]),
    ("hangtrace-20", [HT, "--duration", "600", "--sample-hz", "20", "--json", "{json}", "--pid", "{pid}"]),
    ("hangtrace-100", [HT, "--duration", "600", "--sample-hz", "100", "--json", "{json}", "--pid", "{pid}"]),
    ("perf-100", ["perf", "record", "-q", "-F", "100", "-g", "-o", "{perf}", "-p", "{pid}"]),
]
TOOLS = [x.strip() for x in os.environ.get("TOOLS", "").split(",") if x.strip()]
if TOOLS:
    CONFIGS = [c for c in CONFIGS if c[0] == "untraced" or c[0] in TOOLS]
missing = {name for name, argv in CONFIGS if argv and not have(argv[0])}


def wait_line(stream, needle, timeout):
    """Reads `stream` (a tracer's stderr) until a line holds `needle`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            return False
        if needle in line:
            return True
    return False


def wait_perf_attached(proc, timeout=30, settle=0.5):
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline and proc.poll() is None:
        k = bpf_links(proc.pid, ("perf_event",))
        if k != last:
            last, since = k, time.monotonic()
        elif k > 0 and time.monotonic() - since > settle:
            return True
        time.sleep(0.05)
    return False


def run_one(name, argv, rep):
    gate = make_gate(os.path.join(TMP, "gate"))
    out = os.path.join(TMP, "result")
    js = os.path.join(TMP, "hangtrace.json")
    perf_data = os.path.join(TMP, "perf.data")
    for f in (out, js, perf_data):
        if os.path.exists(f):
            os.unlink(f)
    job = subprocess.Popen(JOB + ["--gate", gate, "--out", out], stdout=subprocess.PIPE, text=True)
    ready = job.stdout.readline()
    if not ready.startswith("READY"):
        sys.exit("bench_sampler: the job did not start: %r" % ready)
    res = {"threads": int(ready.split("threads=")[1])}
    tracer = None
    if argv:
        a = [x.replace("{pid}", str(job.pid)).replace("{json}", js).replace("{perf}", perf_data) for x in argv]
        tracer = subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  text=True)
        ok = (wait_line(tracer.stderr, "tracing", 120) if name.startswith("hangtrace")
              else wait_perf_attached(tracer))
        if not ok:
            tracer.kill()
            job.kill()
            sys.exit("bench_sampler: %s did not attach" % name)
        if name.startswith("hangtrace"):
            # Drain its stderr in the background (it may print findings).
            import threading
            threading.Thread(target=tracer.stderr.read, daemon=True).start()
    cpu0 = proc_cpu_ns(tracer.pid) if tracer else None
    open_gate(gate)
    job.wait()
    if tracer:
        cpu1 = proc_cpu_ns(tracer.pid)
        res["tracer_cpu_s"] = (cpu1 - cpu0) / 1e9 if cpu0 is not None and cpu1 is not None else None
        if name.startswith("hangtrace"):
            tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=300)
        if name.startswith("hangtrace"):
            try:
                live = json.load(open(js)).get("live", {})
                cs = live.get("cpu_samples", {})
                res["samples"], res["unreadable"] = cs.get("samples"), cs.get("unreadable")
                res["dropped"] = live.get("dropped")
            except (OSError, ValueError):
                pass
    r = read_result(out)
    if not r:
        sys.exit("bench_sampler: %s: no result from the job" % name)
    res["loop_s"] = r[1] / 1e9
    return res


results = {name: [] for name, _ in CONFIGS}
order = [c for c in CONFIGS if c[0] not in missing]
for rep in range(REPS):
    k = rep % len(order)
    for name, argv in order[k:] + order[:k]:
        r = run_one(name, argv, rep)
        results[name].append(r)
        print("  round %d %-14s loop %.3f s%s" % (rep + 1, name, r["loop_s"],
              "" if r.get("tracer_cpu_s") is None else "  tracer cpu %.3f s" % r["tracer_cpu_s"]),
              file=sys.stderr, flush=True)

base = med([r["loop_s"] for r in results["untraced"]])
threads = med([r["threads"] for r in results["untraced"]])
print("torch job: %d threads, %d steps, %d CPUs, median of %d rounds" % (threads, STEPS, os.cpu_count(), REPS))
print("%-14s %9s %9s %12s %9s %9s %11s" % ("config", "loop s", "slowdown", "tracer CPU s", "% core", "samples",
                                           "unreadable"))
for name, _ in CONFIGS:
    if name in missing:
        print("%-14s not installed" % name)
        continue
    rs = results[name]
    loop = med([r["loop_s"] for r in rs])
    cpu = med([r.get("tracer_cpu_s") for r in rs])
    print("%-14s %9.3f %8.3fx %12s %9s %9s %11s" % (
        name, loop, loop / base, fmt(cpu, ".3f"), fmt(None if cpu is None else 100 * cpu / loop, ".2f"),
        fmt(med([r.get("samples") for r in rs]), ".0f"), fmt(med([r.get("unreadable") for r in rs]), ".0f")))
s100 = [r["loop_s"] for r in results.get("hangtrace-100", [])]
if s100:
    ratio = med(s100) / base
    print("target: hangtrace --sample-hz 100 <= 1.02x untraced: %.3fx %s" % (ratio, "PASS" if ratio <= 1.02 else "FAIL"))
EOF
