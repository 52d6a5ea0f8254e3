#!/usr/bin/env bash
# Benchmark (not a test): what does live tracing cost the traced job, next to
# the tools people reach for instead?
#
# Workloads (bench/*.cpp, compiled here with g++ -O2 into a temp dir; only
# their hot loop is timed, by themselves):
#   futex ping-pong   two threads, one futex word, N round trips
#   pipe ping-pong    two processes, two pipes, N round trips
#   shm prod-cons     per message a fresh 256 KiB /dev/shm segment: create,
#                     fill, hand over by pipe, map, read, unlink (a DataLoader's
#                     batch handover)
#   tmpfs faults      N times: a fresh 4 MiB /dev/shm file, mapped, one write
#                     per page, unmapped, unlinked
#   futex storm       event_storm: N FUTEX_WAITs on a mismatched word (EAGAIN
#                     at once); under hangtrace* each is one futex-wait record
#   pipe storm        event_storm --pipe: N read()s of an empty O_NONBLOCK
#                     pipe; under hangtrace* each is one syscall-block record
#   poll storm        event_storm --poll: N poll()s of no fds, timeout 0; the
#                     cheapest call that is one syscall-block record, so the
#                     highest record rate one CPU produces
#   The three storms measure the live transport and aggregator: after the main
#   table an "event rate" section gives, per tracer, the events/s the workload
#   produced, the events/s hangtrace delivered through its aggregator (events
#   minus dropped from its JSON), drops, the tracer's CPU (and per event: its
#   CPU under hangtrace* minus under hangtrace, over the extra events), RSS
#   and the workload's slowdown.
# Configurations, side by side in one run, interleaved round-robin:
#   untraced
#   hangtrace -- W                 live tracing from the first instruction,
#                                  every hook this kernel has
#   hangtrace --min-block-ms 0 -- W  the same, streaming every wait (the
#                                  transport under load: events/s, drops)
#   strace -f -qq -o /dev/null -- W
#   perf trace -o /dev/null -- W   (all syscalls, children inherited)
#   bpftrace -c W                  the equivalent script: futex/read/write
#                                  enter+exit timing, per-tid start map,
#                                  in-kernel filter on the launched process
#                                  tree (followed through fork)
#   offcputime -p PID              libbpf-tools; attached before the loop
#                                  starts (the workload waits on a FIFO);
#                                  traces the main process only
# perf trace and bpftrace need tracefs; when it is not mounted they run in a
# private mount namespace with tracefs mounted there (perf would otherwise
# mount it for the whole machine).
#
# Figures per workload x config (median of REPS runs): the workload's loop
# time, per operation, slowdown vs untraced; the tracer's own CPU time
# (utime+stime of the tracer process alone, read when it has exited but is not
# yet reaped), its peak RSS (VmHWM, sampled every 20 ms), and for hangtrace
# the events and dropped records from its JSON `live` block, and events/s over
# the loop. Slow tracers run fewer iterations (strace: STRACE_SCALE); the
# ratio is per operation. With BPF_STATS=1, also the in-kernel cost of each of
# hangtrace's programs (run_cnt, run_time_ns from /proc/<hangtrace>/fdinfo of
# its program fds, last sample before it exits): this turns on
# kernel.bpf_stats_enabled (machine-wide) for the run and restores it after.
#
# The workload is pinned to the last CPU (taskset; PIN=0 turns that off): a
# ping-pong between two CPUs of a VM mostly measures how fast an idle vCPU
# wakes up, which any busy tracer on the other CPU "speeds up". Every tracer
# runs on the other CPUs (taskset; what "when a core is free" means in the
# targets): left free, the scheduler sometimes wakes a tracer's consumer on
# the workload's CPU (wake-affine, after a ring-buffer wakeup raised there),
# and the two then share one CPU -- run to run that alone swung the storms by
# 20 %. PIN=0 pins neither.
#
# Env: HANGTRACE_BIN (./build/hangtrace), REPS (5), SCALE (1.0: iteration
#      multiplier), STRACE_SCALE (0.2), PIN (1), BPF_STATS (0), KEEP (keep
#      the temp dir), ONLY (comma-separated workloads, by name or a part of
#      it: ONLY="storm" runs the two storms, ONLY="futex ping,pipe ping"),
#      TOOLS (comma-separated configs, exact names: TOOLS="untraced,hangtrace,
#      hangtrace*,bpftrace"; untraced always runs: slowdowns need it).
# Needs root. Tools that are missing are reported as "not installed"; this
# script installs nothing.
set -euo pipefail

HANGTRACE_BIN=${HANGTRACE_BIN:-./build/hangtrace}
REPS=${REPS:-5}
SCALE=${SCALE:-1.0}
STRACE_SCALE=${STRACE_SCALE:-0.2}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "bench_live: $*" >&2; exit 1; }
# shellcheck source=scripts/bench_lib.sh
source "$HERE/bench_lib.sh"
[[ $(id -u) -eq 0 ]] || die "needs root (BPF, ptrace, perf events)"
command -v "$PYTHON" >/dev/null || die "needs $PYTHON"
[[ -x $HANGTRACE_BIN ]] || echo "bench_live: no hangtrace binary at $HANGTRACE_BIN (set HANGTRACE_BIN); its rows are skipped" >&2

tmp=$(mktemp -d /tmp/hangtrace-bench-live.XXXXXX)
cleanup() {
  bpf_stats_restore
  if [[ -z ${KEEP:-} ]]; then rm -rf "$tmp"; else echo "kept $tmp" >&2; fi
  rm -f /dev/shm/hangtrace-bench-* 2>/dev/null || true
}
trap cleanup EXIT

compile_bench_workloads "$tmp" futex_pingpong pipe_pingpong shm_prodcons tmpfs_faults event_storm

bpf_stats_on

BPF_STATS=${BPF_STATS:-0} HANGTRACE_BIN=$(realpath -m "$HANGTRACE_BIN") BIN_DIR=$tmp REPS=$REPS SCALE=$SCALE STRACE_SCALE=$STRACE_SCALE \
  PIN=${PIN:-1} ONLY=${ONLY:-} TOOLS=${TOOLS:-} BENCH_LIB_DIR=$BENCH_LIB_DIR \
  "$PYTHON" - <<'EOF'
import json, os, shutil, signal, subprocess, sys, time
sys.path.insert(0, os.environ["BENCH_LIB_DIR"])
from bench_lib import (PROG_NAMES, fmt, have, make_gate, med, name_progs, open_gate, pins, proc_hwm_kib,
                       prog_stats, read_result, tracefs_mounted, tracefs_ns, wait_links_settle,
                       watch_until_exit)

BIN = os.environ["BIN_DIR"]
TMP = BIN
HT = os.environ["HANGTRACE_BIN"]
REPS = int(os.environ["REPS"])
SCALE = float(os.environ["SCALE"])
STRACE_SCALE = float(os.environ["STRACE_SCALE"])
BPF_STATS = os.environ.get("BPF_STATS") == "1"
# The workload's CPU, and the tracers': every CPU but the workload's.
PIN_CPU, TRACER_PIN = pins()

# name, binary, iterations at SCALE 1 (~0.3 s untraced on a 2-core VM), whether
# strace runs fewer of them (syscall-bound: every call stops twice in strace),
# extra arguments
WORKLOADS = [
    ("futex ping-pong", "futex_pingpong", 40000, True, []),
    ("pipe ping-pong", "pipe_pingpong", 40000, True, []),
    ("shm prod-cons", "shm_prodcons", 300, False, []),
    ("tmpfs faults", "tmpfs_faults", 20, False, []),
    # One live record per call under hangtrace*: the transport's rate.
    ("futex storm", "event_storm", 1000000, True, []),
    ("pipe storm", "event_storm", 1000000, True, ["--pipe"]),
    ("poll storm", "event_storm", 1000000, True, ["--poll"]),
]
ONLY = [x.strip().lower() for x in os.environ.get("ONLY", "").split(",") if x.strip()]
if ONLY:
    WORKLOADS = [w for w in WORKLOADS if any(o in w[0] for o in ONLY)]
    if not WORKLOADS:
        sys.exit("bench_live: ONLY=%s matches no workload" % os.environ["ONLY"])
TOOLS = [x.strip() for x in os.environ.get("TOOLS", "").split(",") if x.strip()]


TRACEFS_MOUNTED = tracefs_mounted()
# perf trace and bpftrace read tracepoint formats from tracefs; without it,
# give them one in a private mount namespace (nothing leaks to the machine).
TRACEFS_NS = tracefs_ns()

BPFTRACE_SCRIPT = os.path.join(TMP, "equivalent.bt")
with open(BPFTRACE_SCRIPT, "w") as f:
    f.write(r"""
BEGIN { @traced[cpid] = 1; }
tracepoint:sched:sched_process_fork /@traced[args->parent_pid]/ { @traced[args->child_pid] = 1; }
tracepoint:raw_syscalls:sys_enter
/@traced[pid] && (args->id == 202 || args->id == 0 || args->id == 1)/
{ @start[tid] = nsecs; @nr[tid] = args->id; }
tracepoint:raw_syscalls:sys_exit /@start[tid]/
{
  $d = nsecs - @start[tid];
  if ($d > 5000000) { @blocked[@nr[tid], comm] = count(); }
  @calls[@nr[tid]] = count();
  delete(@start[tid]); delete(@nr[tid]);
}
""")

# name, how, argv before the workload (launch) or after (attach: {pid}),
# iteration scale, reason it cannot run
CONFIGS = [
    ("untraced", "launch", [], 1.0, None),
    ("hangtrace", "launch", [HT, "--json", "{json}", "--"], 1.0,
     None if os.access(HT, os.X_OK) else "no binary at " + HT),
    # Every wait streamed (no 5 ms threshold): the transport under load.
    ("hangtrace*", "launch", [HT, "--min-block-ms", "0", "--json", "{json}", "--"], 1.0,
     None if os.access(HT, os.X_OK) else "no binary at " + HT),
    ("strace -f", "launch", ["strace", "-f", "-qq", "-o", "/dev/null", "--"], STRACE_SCALE,
     None if have("strace") else "not installed"),
    ("perf trace", "launch", TRACEFS_NS + ["perf", "trace", "-o", "/dev/null", "--"], 1.0,
     None if have("perf") else "not installed"),
    ("bpftrace", "bpftrace", TRACEFS_NS + ["bpftrace", "-o", "/dev/null"], 1.0,
     None if have("bpftrace") else "not installed"),
    ("offcputime", "attach", ["offcputime", "-p", "{pid}", "600"], 1.0,
     None if (have("offcputime") or os.path.exists("/usr/sbin/offcputime")) else "not installed"),
]
if TOOLS:
    unknown = set(TOOLS) - {c[0] for c in CONFIGS}
    if unknown:
        sys.exit("bench_live: TOOLS: no config named %s (have: %s)"
                 % (", ".join(sorted(unknown)), ", ".join(c[0] for c in CONFIGS)))
    CONFIGS = [c for c in CONFIGS if c[0] == "untraced" or c[0] in TOOLS]


def sample_stats(stats):
    """A watch_until_exit sampler that keeps the latest BPF program stats of
    the tracer that has all its programs loaded."""
    def sample(pid):
        current = prog_stats(pid)
        # Programs load module by module and close on exit: keep the
        # latest sample that has them all.
        if current and len(current) >= len(stats):
            name_progs(current)
            stats.clear()
            stats.update(current)
    return sample


def run_one(config, workload, rep):
    name, how, pre, scale, _ = config
    _, binary, iters, syscall_bound, extra = workload
    n = max(1, int(iters * SCALE * (scale if syscall_bound else 1.0)))
    out = os.path.join(TMP, "result")
    js = os.path.join(TMP, "hangtrace.json")
    errf = os.path.join(TMP, "tracer.err")
    for p in (out, js):
        if os.path.exists(p):
            os.unlink(p)
    wl = [os.path.join(BIN, binary)] + extra + [str(n), "--out", out]
    if PIN_CPU is not None:
        wl = [shutil.which("taskset"), "-c", str(PIN_CPU)] + wl   # execs the workload: same pid
    row = {"cpu": None, "hwm": None, "events": None, "dropped": None, "error": None, "wall": None}
    err = open(errf, "w")
    if how in ("launch", "bpftrace"):
        if how == "bpftrace":
            argv = TRACER_PIN + pre + ["-c", " ".join(wl), BPFTRACE_SCRIPT]
        else:
            argv = ((TRACER_PIN if pre else []) + [a.replace("{json}", js) for a in pre]) + wl
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        stats = {} if BPF_STATS and name.startswith("hangtrace") else None
        hwm, cpu, wall = watch_until_exit(proc.pid, 300, sample_stats(stats) if stats is not None else None)
        if stats:
            row["progs"] = {PROG_NAMES.get(i, "id%d" % i): v for i, v in stats.items()}
        rc = proc.wait()
        row["wall"] = wall
        if pre:
            row["cpu"], row["hwm"] = cpu, hwm
        if rc not in (0, 2) and name != "untraced":      # hangtrace: 2 = critical finding
            row["error"] = "exit %d" % rc
    else:  # attach to a workload that waits on a FIFO until the tracer is in
        gate = make_gate(os.path.join(TMP, "gate"))
        job = subprocess.Popen(wl + ["--gate", gate], stdout=subprocess.DEVNULL, stderr=err)
        argv = TRACER_PIN + [a.replace("{pid}", str(job.pid)) for a in pre]
        tracer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        t0 = time.monotonic()
        last = wait_links_settle(tracer)     # attached: its links exist and stopped growing
        open_gate(gate)
        job.wait()
        row["hwm"] = proc_hwm_kib(tracer.pid)
        tracer.send_signal(signal.SIGINT)
        hwm, cpu, _ = watch_until_exit(tracer.pid, 60)
        row["cpu"], row["hwm"] = cpu, max(hwm, row["hwm"])
        row["wall"] = time.monotonic() - t0
        rc = tracer.wait()
        if last <= 0:
            row["error"] = "never attached"
        elif rc != 0:
            row["error"] = "exit %d" % rc
    err.close()
    res = read_result(out)
    if res is None:
        row["error"] = row["error"] or "no result"
        tail = open(errf).read()[-300:].strip().replace("\n", " | ")
        row["error"] += (": " + tail) if tail else ""
        return row
    row["iters"], row["loop_ns"] = res
    if name.startswith("hangtrace"):
        try:
            live = json.load(open(js)).get("live") or {}
            row["events"], row["dropped"] = live.get("events"), live.get("dropped")
        except (OSError, ValueError) as e:
            row["error"] = "no JSON report (%s)" % e.__class__.__name__
    return row


results = {}   # (config, workload) -> [row]
t_start = time.monotonic()
print("host: %d CPUs, kernel %s; %d runs each, interleaved; tracefs %s"
      % (os.cpu_count(), os.uname().release, REPS,
         "mounted" if TRACEFS_MOUNTED else "not mounted (perf trace, bpftrace: private mount ns)"),
      flush=True)
for rep in range(REPS):
    for c in CONFIGS:
        if c[4]:
            continue
        for w in WORKLOADS:
            row = run_one(c, w, rep)
            results.setdefault((c[0], w[0]), []).append(row)
            if row.get("error"):
                print("  %s / %s run %d: %s" % (c[0], w[0], rep + 1, row["error"]), file=sys.stderr, flush=True)
    print("  round %d/%d done (%.0f s)" % (rep + 1, REPS, time.monotonic() - t_start), file=sys.stderr, flush=True)


print()
hdr = "%-16s %-11s %8s %10s %9s %7s %7s %8s %9s %8s %10s" % (
    "workload", "config", "loop_ms", "us/op", "slowdown", "wall_s", "cpu_s", "rss_MiB", "events", "dropped",
    "events/s")
print(hdr)
print("-" * len(hdr))
for w in WORKLOADS:
    base = med([r["loop_ns"] / r["iters"] for r in results.get(("untraced", w[0]), []) if "loop_ns" in r])
    for c in CONFIGS:
        label = c[0]
        if c[4]:
            print("%-16s %-11s %s" % (w[0], label, c[4]))
            continue
        rows = [r for r in results.get((label, w[0]), []) if "loop_ns" in r and not r.get("error")]
        if not rows:
            errs = [r.get("error") for r in results.get((label, w[0]), [])]
            print("%-16s %-11s failed: %s" % (w[0], label, (errs or ["?"])[0]))
            continue
        per_op = med([r["loop_ns"] / r["iters"] for r in rows])
        loop_ms = med([r["loop_ns"] / 1e6 for r in rows])
        ratio = per_op / base if base else None
        events = med([r["events"] for r in rows])
        ev_s = med([r["events"] / (r["loop_ns"] / 1e9) for r in rows if r["events"] is not None])
        print("%-16s %-11s %8.0f %10.2f %8sx %7s %7s %8s %9s %8s %10s" % (
            w[0], label, loop_ms, per_op / 1e3, fmt(ratio, ".2f"), fmt(med([r["wall"] for r in rows]), ".2f"),
            fmt(med([r["cpu"] for r in rows]), ".2f"),
            fmt(med([r["hwm"] / 1024 if r["hwm"] else None for r in rows]), ".1f"),
            fmt(events, ".0f"), fmt(med([r["dropped"] for r in rows]), ".0f"), fmt(ev_s, ".0f")))
    print()
if BPF_STATS:
    print("in-kernel cost of hangtrace's programs (median over runs; calls are machine-wide --")
    print("every program runs for every event and filters to the traced set in the kernel):")
    for c in [c for c in CONFIGS if c[0].startswith("hangtrace") and not c[4]]:
        for w in WORKLOADS:
            rows = [r for r in results.get((c[0], w[0]), []) if r.get("progs")]
            if not rows:
                continue
            names = sorted({n for r in rows for n in r["progs"]})
            parts = []
            for n in names:
                cnt = med([r["progs"][n][0] for r in rows if n in r["progs"]])
                ns = med([r["progs"][n][1] / r["progs"][n][0] for r in rows
                          if n in r["progs"] and r["progs"][n][0]])
                if cnt:
                    parts.append("%s %.0fx%.0fns" % (n, cnt, ns or 0))
            print("  %-11s %-16s %s" % (c[0], w[0], ", ".join(parts)))
    print()
STORMS = [w for w in WORKLOADS if "storm" in w[0]]
if STORMS:
    print("event rate (one record per call under hangtrace*; the goal: >= 1 M events/s through the")
    print("aggregator, 0 dropped, tracer RSS <= 64 MiB, with the workload on CPU %s and the tracer on CPU %s):"
          % (PIN_CPU if PIN_CPU is not None else "-", TRACER_PIN[2] if TRACER_PIN else "- (free)"))
    hdr = "%-12s %-11s %9s %9s %10s %8s %7s %9s %8s %9s" % (
        "workload", "config", "calls/s", "slowdown", "delivered/s", "dropped", "cpu_s", "cpu_ns/ev", "rss_MiB",
        "kern_ns/ev")
    print(hdr)
    print("-" * len(hdr))
    for w in STORMS:
        base = med([r["loop_ns"] / r["iters"] for r in results.get(("untraced", w[0]), []) if "loop_ns" in r])

        def ok_rows(label):
            return [r for r in results.get((label, w[0]), []) if "loop_ns" in r and not r.get("error")]

        # The tracer's fixed cost (start-up, report) from the run that streams
        # next to nothing (hangtrace, 5 ms threshold): what hangtrace* spends
        # beyond it is the per-event cost of the transport + aggregator.
        quiet = ok_rows("hangtrace")
        quiet_cpu = med([r["cpu"] for r in quiet])
        quiet_ev = med([r["events"] for r in quiet]) or 0
        for c in CONFIGS:
            rows = ok_rows(c[0])
            if c[4] or not rows:
                continue
            per_op = med([r["loop_ns"] / r["iters"] for r in rows])
            calls_s = 1e9 / per_op
            delivered = dropped = cpu_ev = kern_ev = None
            if c[0].startswith("hangtrace"):
                got = [r for r in rows if r["events"] is not None]
                delivered = med([(r["events"] - (r["dropped"] or 0)) / (r["loop_ns"] / 1e9) for r in got])
                dropped = med([r["dropped"] for r in got])
                if c[0] == "hangtrace*" and quiet_cpu is not None:
                    cpu_ev = med([(r["cpu"] - quiet_cpu) * 1e9 / (r["events"] - quiet_ev) for r in got
                                  if r["cpu"] is not None and r["events"] > quiet_ev])
                # All of hangtrace's programs, machine-wide, over the records it
                # streamed (meaningful where nearly every record is the storm's).
                kern_ev = med([sum(v[1] for v in r["progs"].values()) / r["events"] for r in got
                               if r.get("progs") and r["events"]])
            print("%-12s %-11s %9.0f %8sx %10s %8s %7s %9s %8s %9s" % (
                w[0], c[0], calls_s, fmt(per_op / base if base else None, ".2f"), fmt(delivered, ".0f"),
                fmt(dropped, ".0f"), fmt(med([r["cpu"] for r in rows]), ".2f"),
                fmt(cpu_ev, ".0f") if c[0] == "hangtrace*" else "",
                fmt(med([r["hwm"] / 1024 if r["hwm"] else None for r in rows]), ".1f"),
                fmt(kern_ev, ".0f") if c[0] == "hangtrace*" else ""))
        print()
    print("(calls/s: the workload's calls per second of its loop -- under hangtrace* also the records it")
    print(" produced; delivered/s: hangtrace's events minus dropped over the loop time; cpu_ns/ev: the")
    print(" tracer's CPU under hangtrace* minus under hangtrace (which streams next to nothing), per extra")
    print(" event; kern_ns/ev: with BPF_STATS=1, the run time of all of hangtrace's programs (machine-wide)")
    print(" per record streamed. bpftrace counts calls in the kernel (no per-event transport); perf trace")
    print(" and strace format every syscall in user space.)")
    print()
print("(hangtrace*: --min-block-ms 0, every wait streamed. loop_ms: median loop time (strace runs %.0f%%"
      % (STRACE_SCALE * 100))
print(" of the iterations of the ping-pongs: compare us/op); slowdown: us/op vs")
print(" untraced; wall_s: the tracer command from start to exit, its start-up and report included;")
print(" cpu_s, rss_MiB: the tracer process itself (utime+stime, VmHWM); events, dropped: hangtrace's live")
print(" block; events/s: events over the loop time. Workload pinned to CPU %s, tracers to CPU %s. %.0f s in all)"
      % (PIN_CPU if PIN_CPU is not None else "- (none)", TRACER_PIN[2] if TRACER_PIN else "- (none)",
         time.monotonic() - t_start))
EOF
