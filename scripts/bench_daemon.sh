#!/usr/bin/env bash
# Benchmark (not a test): what does the always-on `hangtrace daemon` cost the
# jobs it tracks and the machine, next to what an SRE would leave running
# instead, and does its memory stay flat over a long busy job?
#
# Four sections (SECTIONS, comma-separated; default all):
#
# overhead  The ping-pongs of scripts/bench_live.sh (bench/pipe_pingpong.cpp:
#           two processes, two pipes; bench/futex_pingpong.cpp: two threads,
#           one futex word), ITERS round trips each, timed by themselves (only
#           the loop). Configurations side by side in one run, REPS rounds,
#           interleaved (each round rotates the order of the configurations):
#             baseline     no tracer
#             daemon       `hangtrace daemon --match <this run's workload binary>`:
#                          started fresh for each run, the loop starts once the
#                          daemon said it tracks the job (its /proc scan, every
#                          2 s, finds it; the pipe ping-pong's child is followed
#                          on fork, in the kernel); its default, sampled steady
#                          state (no hook on syscalls, switches, wakeups)
#             daemon-exact the same with --steady-state exact (those hooks always
#                          on: in-kernel histograms of every wait, who-woke-whom)
#             offcputime   libbpf-tools `offcputime -p PID` (main process only:
#                          it takes one pid)
#             bpftrace     an always-on off-CPU histogram (sched_switch, per-tid
#                          start map, hist() of the time off CPU) filtered in the
#                          kernel to the workload's process tree, followed on fork
#           Every tracer is attached before the loop starts (the workload waits
#           on a FIFO, --gate). Figures per workload x config: median us per
#           round trip, slowdown = median traced / median baseline, the spread
#           of the per-round ratios (traced run / the same round's baseline run),
#           the tracer's CPU over the loop as % of one core (/proc/PID/task/*/
#           schedstat; ns, where /proc/PID/stat's utime+stime has 10 ms ticks),
#           its VmHWM, and the daemon's hangtrace_events_total /
#           hangtrace_dropped_events_total. With BPF_STATS=1 also the run count
#           (per round trip) and ns per call of each of the daemon's BPF
#           programs over the loop (kernel.bpf_stats_enabled on for the run,
#           restored after; it inflates the slowdown: quote slowdowns from a
#           run without it).
#           Then the daemon's steady cost while it tracks each ping-pong for
#           TRACK_SECONDS (its scan, metrics and progress-check periods are 2 s,
#           1 s and 15 s: a sub-second loop alone under-samples them): CPU % of
#           one core from /proc/PID/stat utime+stime, from schedstat, and from
#           its own hangtrace_daemon_cpu_seconds_total on /metrics.
# train     The job-side cost on a training loop's throughput: TRAIN_REPS
#           rounds (interleaved, rotated) of TRAIN_STEPS steps of a small model
#           fed by a DataLoader with TRAIN_WORKERS persistent workers and a
#           logger thread (scripts/bench_daemon_job.py train), untraced, under
#           the daemon and under the daemon with --steady-state exact; ms per
#           step, slowdown, and how often the sampled daemon attached its exact
#           hooks (0 expected for a healthy job).
# idle      IDLE_PROCS idle PyTorch jobs (scripts/bench_daemon_job.py idle:
#           torch imported, intra-op threads started, IDLE_WORKERS forked
#           children waiting too, like idle DataLoader workers), and the
#           daemon's CPU over IDLE_SECONDS, twice: matching none of them, then
#           tracking all of them (IDLE_PROCS jobs of 1 + IDLE_WORKERS
#           processes). With PROFILE=1 then a `perf record -g` of the daemon
#           tracking them (PROFILE_SECONDS) and the top of `perf report`, self
#           and inclusive (needs perf: linux-perf).
# soak      A compressed soak (scripts/bench_daemon_job.py soak: a PyTorch
#           DataLoader job, persistent_workers=False, SOAK_WORKERS workers
#           forked anew every epoch of ~1 s, short-lived threads, futex and pipe
#           traffic, 1.2 s / 1.1 s waits into the flight recorder, a 160 MiB RSS
#           step up and down) for SOAK_SECONDS, plus a short extra job every
#           SOAK_JOB_EVERY s (jobs come and go). The daemon runs with
#           --recorder-minutes SOAK_RECORDER_MINUTES (1; default 10) so that its
#           flight recorder reaches its steady size in the first half. Every
#           SOAK_SAMPLE_S: the daemon's VmRSS, hangtrace_tracked,
#           hangtrace_daemon_resident_memory_bytes, events, dropped. Prints
#           first/median/last/max RSS and the slope of the second half (KiB
#           per minute; Theil-Sen: robust to a transient spike). "Compressed": a real job recreates its
#           workers every REAL_EPOCH_MIN (5) minutes, the soak every epoch, so
#           one soak epoch stands for REAL_EPOCH_MIN minutes of a real job's
#           worker churn; the soak must stand for >= 30 min. Also counts the
#           bundles the daemon wrote for this healthy job (0 expected). With
#           PROFILE=1, perf samples the daemon over the soak's last
#           PROFILE_SECONDS (the soak's CPU figure then includes perf's cost).
#
# Targets (printed next to each figure, PASS/FAIL): slowdown <= 1.02x on both
# ping-pongs and on the training loop (the default, sampled daemon); the daemon's CPU <= 1 % of one core (while tracking the
# ping-pongs, and idle with IDLE_PROCS tracked processes); its RSS <= 64 MiB;
# the soak's second-half RSS slope <= SOAK_MAX_SLOPE_KIB_MIN (64) KiB/min (at
# the soak's ~x370 compression, 64 KiB per soak minute is ~0.17 KiB per minute
# of a real job: ~7.5 MiB a month); no bundle for the healthy soak job.
#
# The workloads and jobs are pinned to the last CPU, every tracer (and the
# daemon) to the others (taskset; PIN=0 pins neither), as in bench_live.sh.
#
# Env: HANGTRACE_BIN (./build/hangtrace), PYTHON (/usr/bin/python3), REPS (7),
#      ITERS (400000 round trips per run: ~1.5 s, past the sampled daemon's
#      1 s pass), TOOLS (daemon,daemon-exact,offcputime,bpftrace: the configs
#      besides baseline), BPF_STATS (0), TRACK_SECONDS (30), TRAIN_REPS (7),
#      TRAIN_STEPS (3000), TRAIN_WORKERS (2),
#      IDLE_PROCS (4), IDLE_WORKERS (4), IDLE_SECONDS (60), PROFILE (0),
#      PROFILE_SECONDS (30), SOAK_SECONDS
#      (300), SOAK_SAMPLE_S (5), SOAK_JOB_EVERY (15), SOAK_RECORDER_MINUTES
#      (1), SOAK_WORKERS (8), SOAK_THREADS (4), SOAK_LONG_EVERY (5),
#      SOAK_RSS_EVERY (10), SOAK_RSS_MIB (160), SOAK_BATCHES (32),
#      REAL_EPOCH_MIN (5), SOAK_MAX_SLOPE_KIB_MIN (64), SECTIONS, PIN (1),
#      KEEP (keep the temp dir: daemon logs, samples.json, perf data).
#      A quick trial: REPS=3 ITERS=40000 TRACK_SECONDS=10 IDLE_SECONDS=20
#      SOAK_SECONDS=150.
# Needs root. A peer that is missing is reported "skipped: not installed"
# (scripts/install-deps.sh installs libbpf-tools and bpftrace); a hangtrace
# daemon that fails to start, to track a job or to serve /metrics fails the run
# (exit 1). The PASS/FAIL verdicts do not change the exit status.
set -euo pipefail

HANGTRACE_BIN=${HANGTRACE_BIN:-./build/hangtrace}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "bench_daemon: $*" >&2; exit 1; }
# shellcheck source=scripts/bench_lib.sh
source "$HERE/bench_lib.sh"
[[ $(id -u) -eq 0 ]] || die "needs root (BPF)"
command -v "$PYTHON" >/dev/null || die "needs $PYTHON"
[[ -x $HANGTRACE_BIN ]] || die "no hangtrace binary at $HANGTRACE_BIN (set HANGTRACE_BIN)"

tmp=$(mktemp -d /tmp/hangtrace-bench-daemon.XXXXXX)
cleanup() {
  bpf_stats_restore
  if [[ -z ${KEEP:-} ]]; then rm -rf "$tmp"; else echo "kept $tmp" >&2; fi
}
trap cleanup EXIT

compile_bench_workloads "$tmp" futex_pingpong pipe_pingpong
bpf_stats_on

export PYTHON
HANGTRACE_BIN=$(realpath -m "$HANGTRACE_BIN") BIN_DIR=$tmp JOB_PY=$HERE/bench_daemon_job.py \
  BENCH_LIB_DIR=$BENCH_LIB_DIR "$PYTHON" - <<'EOF'
import json, os, re, signal, subprocess, sys, time
sys.path.insert(0, os.environ["BENCH_LIB_DIR"])
from bench_lib import (PROG_NAMES, VERDICTS, HangtraceDaemon, HangtraceFailed, cpu_pct, ecma_literal, end, fmt,
                       have, kill_started, make_gate, med, metric_cpu_pct, name_progs, open_gate, pins, proc_cpu_ns,
                       proc_cpu_s, proc_hwm_kib, proc_status_kib, prog_stats, read_result, report_profile, spawn,
                       start_profile, tracefs_ns, verdict, wait_links_settle)

TMP = os.environ["BIN_DIR"]
HT = os.environ["HANGTRACE_BIN"]
JOB_PY = os.environ["JOB_PY"]
PYTHON = os.environ["PYTHON"]
E = os.environ.get
REPS = int(E("REPS", "7"))
ITERS = int(E("ITERS", "400000"))
SECTIONS = [s.strip() for s in E("SECTIONS", "overhead,train,idle,soak").split(",") if s.strip()]
TOOLS = [s.strip() for s in E("TOOLS", "daemon,daemon-exact,offcputime,bpftrace").split(",") if s.strip()]
TRACK_SECONDS = float(E("TRACK_SECONDS", "30"))
IDLE_PROCS = int(E("IDLE_PROCS", "4"))
IDLE_WORKERS = int(E("IDLE_WORKERS", "4"))
IDLE_SECONDS = float(E("IDLE_SECONDS", "60"))
PROFILE = E("PROFILE", "0") == "1"
BPF_STATS = E("BPF_STATS", "0") == "1"
PROFILE_SECONDS = float(E("PROFILE_SECONDS", "30"))
SOAK_SECONDS = float(E("SOAK_SECONDS", "300"))
SOAK_SAMPLE_S = float(E("SOAK_SAMPLE_S", "5"))
SOAK_JOB_EVERY = float(E("SOAK_JOB_EVERY", "15"))
SOAK_RECORDER_MINUTES = E("SOAK_RECORDER_MINUTES", "1")
SOAK_WORKERS = int(E("SOAK_WORKERS", "8"))
REAL_EPOCH_MIN = float(E("REAL_EPOCH_MIN", "5"))
SOAK_MAX_SLOPE = float(E("SOAK_MAX_SLOPE_KIB_MIN", "64"))
TRAIN_REPS = int(E("TRAIN_REPS", "7"))
TRAIN_STEPS = int(E("TRAIN_STEPS", "3000"))
# The issue's targets.
MAX_SLOWDOWN, MAX_CPU_PCT, MAX_RSS_MIB, MIN_SOAK_EQUIV_MIN = 1.02, 1.0, 64.0, 30.0

PIN_CPU, TRACER_PIN = pins()
WL_PIN = ["taskset", "-c", str(PIN_CPU)] if PIN_CPU is not None else []
for s in SECTIONS:
    if s not in ("overhead", "train", "idle", "soak"):
        sys.exit("bench_daemon: SECTIONS: no section %r (have: overhead, train, idle, soak)" % s)

def Daemon(patterns, extra=()):
    """One `hangtrace daemon` on the tracers' CPUs, metrics on a free port."""
    return HangtraceDaemon(HT, TMP, patterns, extra, pin=TRACER_PIN)


# ---- overhead -------------------------------------------------------------------------

WORKLOADS = [("pipe ping-pong", "pipe_pingpong"), ("futex ping-pong", "futex_pingpong")]
BPFTRACE_SCRIPT = os.path.join(TMP, "offcpu_hist.bt")
with open(BPFTRACE_SCRIPT, "w") as f:
    # Always-on off-CPU histogram of one process tree ($1: its root pid).
    f.write(r"""
BEGIN { @traced[$1] = 1; }
tracepoint:sched:sched_process_fork /@traced[args->parent_pid]/ { @traced[args->child_pid] = 1; }
tracepoint:sched:sched_switch /@traced[pid]/ { @off[args->prev_pid] = nsecs; }
tracepoint:sched:sched_switch /@off[args->next_pid]/
{
  @offcpu_us = hist((nsecs - @off[args->next_pid]) / 1000);
  delete(@off[args->next_pid]);
}
""")

CONFIGS = [
    ("baseline", None),
    ("daemon", None),
    ("daemon-exact", None),
    ("offcputime", None if have("offcputime") or os.path.exists("/usr/sbin/offcputime") else "not installed"),
    ("bpftrace", None if have("bpftrace") else "not installed"),
]
unknown = set(TOOLS) - {c[0] for c in CONFIGS}
if unknown:
    sys.exit("bench_daemon: TOOLS: no config named %s" % ", ".join(sorted(unknown)))
CONFIGS = [c for c in CONFIGS if c[0] == "baseline" or c[0] in TOOLS]
OFFCPUTIME = "offcputime" if have("offcputime") else "/usr/sbin/offcputime"


def workload_argv(binary, iters, out, gate):
    return WL_PIN + [os.path.join(TMP, binary), str(iters), "--out", out, "--gate", gate]


def daemon_pattern(binary):
    # This run's binary only (another benchmark's ping-pong is not tracked).
    return ecma_literal(os.path.join(TMP, binary) + " ")


def run_one(config, workload, iters=ITERS):
    name = config[0]
    binary = workload[1]
    out = os.path.join(TMP, "result")
    if os.path.exists(out):
        os.unlink(out)
    gate = make_gate(os.path.join(TMP, "gate"))
    errf = open(os.path.join(TMP, "tracer.err"), "w")
    row = {"error": None}
    tracer = daemon = None
    job = spawn(workload_argv(binary, iters, out, gate), stderr=errf, start_new_session=True)
    job.own_group = True    # the pipe ping-pong's child goes with it
    if name in ("daemon", "daemon-exact"):
        daemon = Daemon([daemon_pattern(binary)], ["--steady-state", "exact"] if name == "daemon-exact" else [])
        daemon.wait_tracking([job.pid])
        pid = daemon.pid
    elif name == "offcputime":
        tracer = spawn(TRACER_PIN + [OFFCPUTIME, "-p", str(job.pid), "600"], stderr=errf)
        if wait_links_settle(tracer) <= 0:
            row["error"] = "never attached"
        pid = tracer.pid
    elif name == "bpftrace":
        tracer = spawn(TRACER_PIN + tracefs_ns() + ["bpftrace", "-o", os.path.join(TMP, "bpftrace.out"),
                                                    BPFTRACE_SCRIPT, str(job.pid)], stderr=errf)
        # Attached: its perf events (tracepoints, perf buffers) stopped
        # growing. (A BEGIN printf cannot say it: -o output is buffered.)
        if wait_links_settle(tracer, settle=0.5, kinds=("bpf_link", "perf_event")) <= 0:
            row["error"] = "never attached"
        pid = tracer.pid
    else:
        pid = None
    a = (time.monotonic(), proc_cpu_ns(pid), proc_cpu_s(pid)) if pid else None
    progs0 = prog_stats(daemon.pid) if daemon and BPF_STATS else None
    open_gate(gate)
    job.wait()
    if pid:
        b = (time.monotonic(), proc_cpu_ns(pid), proc_cpu_s(pid))
        row["cpu_pct"] = cpu_pct(a, b)[0]
        row["hwm"] = proc_hwm_kib(pid)
    if progs0:
        progs1 = prog_stats(daemon.pid)
        name_progs(progs1)
        row["progs"] = {PROG_NAMES.get(i, "id%d" % i): (v[0] - progs0[i][0], v[1] - progs0[i][1])
                        for i, v in progs1.items() if i in progs0}
    if daemon:
        m = daemon.metrics()
        row["events"] = m.get("hangtrace_events_total")
        row["dropped"] = m.get("hangtrace_dropped_events_total")
        daemon.stop()
    if tracer:
        rc = end(tracer, signal.SIGINT, 60)
        if rc != 0 and not row["error"]:
            row["error"] = "exit %d" % rc
    errf.close()
    res = read_result(out)
    if res is None:
        tail = open(os.path.join(TMP, "tracer.err")).read()[-300:].strip().replace("\n", " | ")
        row["error"] = (row["error"] or "no result") + (": " + tail if tail else "")
    else:
        row["iters"], row["loop_ns"] = res
        row["per_op"] = res[1] / res[0]
    return row


def overhead():
    print("== overhead: %d rounds, %d round trips per run, workload on CPU %s, tracers on CPU %s"
          % (REPS, ITERS, PIN_CPU, TRACER_PIN[2] if TRACER_PIN else "-"), flush=True)
    results = {}   # (config, workload) -> [row per round]
    runnable = [c for c in CONFIGS if not c[1]]
    t0 = time.monotonic()
    for rep in range(REPS):
        order = runnable[rep % len(runnable):] + runnable[:rep % len(runnable)]
        for w in WORKLOADS:
            for c in order:
                row = run_one(c, w)
                if row["error"]:
                    if c[0].startswith("daemon"):
                        raise HangtraceFailed("daemon / %s run %d: %s" % (w[0], rep + 1, row["error"]))
                    print("  %s / %s run %d: %s" % (c[0], w[0], rep + 1, row["error"]), file=sys.stderr)
                results.setdefault((c[0], w[0]), []).append(row)
        print("  round %d/%d done (%.0f s)" % (rep + 1, REPS, time.monotonic() - t0), file=sys.stderr, flush=True)

    print()
    hdr = "%-16s %-11s %8s %9s %20s %9s %8s %8s %8s" % (
        "workload", "config", "us/op", "slowdown", "per-round min..max", "cpu %core", "rss_MiB", "events",
        "dropped")
    print(hdr)
    print("-" * len(hdr))
    slow = {}
    for w in WORKLOADS:
        base_rows = results.get(("baseline", w[0]), [])
        base = med([r.get("per_op") for r in base_rows])
        for c in CONFIGS:
            if c[1]:
                print("%-16s %-11s skipped: %s" % (w[0], c[0], c[1]))
                continue
            rows = results.get((c[0], w[0]), [])
            ok = [r for r in rows if r.get("per_op") and not r["error"]]
            if not ok:
                print("%-16s %-11s failed: %s" % (w[0], c[0], (rows[0]["error"] if rows else "?")))
                continue
            per_op = med([r["per_op"] for r in ok])
            ratio = per_op / base if base else None
            paired = [r["per_op"] / b["per_op"] for r, b in zip(rows, base_rows)
                      if r.get("per_op") and b.get("per_op") and not r["error"]]
            spread = "%.3f..%.3f" % (min(paired), max(paired)) if paired and c[0] != "baseline" else ""
            slow[(c[0], w[0])] = (ratio, paired)
            print("%-16s %-11s %8.2f %8sx %20s %9s %8s %8s %8s" % (
                w[0], c[0], per_op / 1e3, fmt(ratio, ".3f"), spread, fmt(med([r.get("cpu_pct") for r in ok]), ".2f"),
                fmt(med([r["hwm"] / 1024 if r.get("hwm") else None for r in ok]), ".1f"),
                fmt(med([r.get("events") for r in ok]), ".0f"), fmt(med([r.get("dropped") for r in ok]), ".0f")))
        print()
    print("(us/op: median over %d runs of the loop time per round trip; slowdown: that / baseline's; "
          "per-round: each run / the same round's baseline run; cpu %%core: the tracer's CPU (schedstat) over "
          "the loop; rss: VmHWM; events, dropped: the daemon's /metrics after the loop)" % REPS)
    print()
    if "daemon" in TOOLS:
        for w in WORKLOADS:
            ratio, paired = slow.get(("daemon", w[0]), (None, []))
            if ratio is None:
                continue
            verdict(ratio <= MAX_SLOWDOWN, "%s under the daemon: slowdown %.3fx (median of %d; per round %s); "
                    "target <= %.2fx" % (w[0], ratio, len(paired),
                                         "%.3f..%.3f" % (min(paired), max(paired)) if paired else "-", MAX_SLOWDOWN))
        rows = [r for w in WORKLOADS for r in results.get(("daemon", w[0]), []) if r.get("hwm")]
        hwm = max(r["hwm"] for r in rows) / 1024 if rows else None
        if hwm is not None:
            verdict(hwm <= MAX_RSS_MIB, "daemon RSS (VmHWM, max over the runs above): %.1f MiB; target <= %.0f MiB"
                    % (hwm, MAX_RSS_MIB))
        drops = sum(r.get("dropped") or 0 for r in rows)
        print("daemon: %d dropped events over all runs" % drops)
        print()
        if BPF_STATS:
            bpf_cost(results)
        track(results)
    return results


def bpf_cost(results):
    """The daemon's BPF programs over the loops: calls (machine-wide) per round
    trip, ns per call, and ns per round trip, median over the runs."""
    print("in-kernel cost of the daemon's programs over the loop (BPF_STATS=1; bpf_stats adds its own ~50-80 ns "
          "per call; calls are machine-wide, filtered to the tracked set in the kernel):")
    for w in WORKLOADS:
        rows = [r for r in results.get(("daemon", w[0]), []) if r.get("progs") and r.get("iters")]
        if not rows:
            continue
        names = sorted({n for r in rows for n in r["progs"]})
        parts, total = [], []
        for n in names:
            per_rt = med([r["progs"][n][0] / r["iters"] for r in rows if n in r["progs"]])
            ns = med([r["progs"][n][1] / r["progs"][n][0] for r in rows if n in r["progs"] and r["progs"][n][0]])
            if per_rt and per_rt >= 0.01:
                parts.append((per_rt * (ns or 0), "%s %.2f x %.0f ns" % (n, per_rt, ns or 0)))
        total = med([sum(v[1] for v in r["progs"].values()) / r["iters"] for r in rows])
        base = med([r.get("per_op") for r in results.get(("baseline", w[0]), [])])
        print("  %-16s %s ns per round trip in all (%s of the baseline's %.2f us)" % (
            w[0], fmt(total, ".0f"), fmt(total / base * 100 if base and total else None, ".1f") + " %",
            (base or 0) / 1e3))
        for _, text in sorted(parts, reverse=True):
            print("      " + text)
    print()


def track(results):
    """The daemon's CPU while it tracks each ping-pong for TRACK_SECONDS."""
    if TRACK_SECONDS <= 0:
        return
    print("== daemon cost while tracking each ping-pong for %.0f s (loop sized from the baseline)" % TRACK_SECONDS,
          flush=True)
    for w in WORKLOADS:
        base = med([r.get("per_op") for r in results.get(("baseline", w[0]), [])]) or 10000
        iters = max(1000, int(TRACK_SECONDS * 1e9 / base))
        out = os.path.join(TMP, "result")
        gate = make_gate(os.path.join(TMP, "gate"))
        job = spawn(workload_argv(w[1], iters, out, gate), start_new_session=True)
        job.own_group = True
        d = Daemon([daemon_pattern(w[1])])
        d.wait_tracking([job.pid])
        time.sleep(1)
        a, ma = d.sample(), d.metrics()
        open_gate(gate)
        # Windows end before the loop does (the scan would see the job end).
        deadline = time.monotonic() + TRACK_SECONDS * 0.9
        while time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.1)
        b, mb = d.sample(), d.metrics()
        hwm = proc_hwm_kib(d.pid)
        end(job, signal.SIGKILL)
        d.stop()
        ns, ticks = cpu_pct(a, b)
        mpct = metric_cpu_pct(ma, mb, b[0] - a[0])
        print("  %-16s %.1f s: schedstat %s %%, /proc/PID/stat %s %%, /metrics %s %% of one core; VmHWM %.1f MiB; "
              "events +%.0f, dropped +%.0f" % (
                  w[0], b[0] - a[0], fmt(ns, ".2f"), fmt(ticks, ".2f"), fmt(mpct, ".2f"), hwm / 1024,
                  mb.get("hangtrace_events_total", 0) - ma.get("hangtrace_events_total", 0),
                  mb.get("hangtrace_dropped_events_total", 0) - ma.get("hangtrace_dropped_events_total", 0)))
        verdict(ns is not None and ns <= MAX_CPU_PCT,
                "daemon CPU while tracking the %s: %s %% of one core (schedstat; stat %s %%, /metrics %s %%); "
                "target <= %.0f %%" % (w[0], fmt(ns, ".2f"), fmt(ticks, ".2f"), fmt(mpct, ".2f"), MAX_CPU_PCT))
    print()


# ---- idle -----------------------------------------------------------------------------

def train_one(config, rep):
    """One fixed-work training run (bench_daemon_job.py train) under `config`."""
    out = os.path.join(TMP, "train-%s-%d.json" % (config, rep))
    gate = make_gate(os.path.join(TMP, "train-gate-%s-%d" % (config, rep)))
    outp = os.path.join(TMP, "train.out")
    job = spawn(WL_PIN + [PYTHON, JOB_PY, "train", str(TRAIN_STEPS), gate, out], stdout=open(outp, "w"),
                stderr=subprocess.DEVNULL, start_new_session=True)
    job.own_group = True
    deadline = time.monotonic() + 300
    while "READY" not in open(outp).read():
        if job.poll() is not None or time.monotonic() > deadline:
            raise HangtraceFailed("the training job did not start (needs torch in %s)" % PYTHON)
        time.sleep(0.05)
    daemon = None
    if config != "baseline":
        daemon = Daemon([ecma_literal(gate)], ["--steady-state", "exact"] if config == "daemon-exact" else [])
        daemon.wait_tracking([job.pid])
    open_gate(gate)
    job.wait()
    row = {}
    if daemon:
        row["hot"] = daemon.metrics().get("hangtrace_exact_hooks_attachments_total")
        daemon.stop()
    try:
        res = json.load(open(out))
        row["per_step"] = res["seconds"] / res["steps"]
    except (OSError, ValueError, KeyError):
        raise HangtraceFailed("training run %s/%d wrote no result" % (config, rep))
    return row


def train():
    configs = ["baseline"] + [c for c in ("daemon", "daemon-exact") if c in TOOLS]
    print("== train: %d rounds of %d steps of a DataLoader-fed training loop (PyTorch, %s workers), workload "
          "on CPU %s" % (TRAIN_REPS, TRAIN_STEPS, E("TRAIN_WORKERS", "2"), PIN_CPU), flush=True)
    rows = {c: [] for c in configs}
    t0 = time.monotonic()
    for rep in range(TRAIN_REPS):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        for c in order:
            rows[c].append(train_one(c, rep))
        print("  round %d/%d done (%.0f s)" % (rep + 1, TRAIN_REPS, time.monotonic() - t0), file=sys.stderr,
              flush=True)
    base = med([r["per_step"] for r in rows["baseline"]])
    print()
    print("%-13s %10s %9s %20s" % ("config", "ms/step", "slowdown", "per-round min..max"))
    for c in configs:
        per = med([r["per_step"] for r in rows[c]])
        paired = [r["per_step"] / b["per_step"] for r, b in zip(rows[c], rows["baseline"])]
        print("%-13s %10.3f %8.3fx %20s" % (c, per * 1e3, per / base,
                                           "" if c == "baseline" else "%.3f..%.3f" % (min(paired), max(paired))))
    hot = [r.get("hot") for r in rows.get("daemon", []) if r.get("hot") is not None]
    if hot:
        print("(the sampled daemon attached its exact hooks %d times over these runs)" % sum(hot))
    print()
    if "daemon" in rows:
        per = med([r["per_step"] for r in rows["daemon"]])
        verdict(per / base <= MAX_SLOWDOWN, "training loop under the daemon: slowdown %.3fx (median of %d); "
                "target <= %.2fx" % (per / base, TRAIN_REPS, MAX_SLOWDOWN))


def start_idle_jobs(n):
    jobs = []
    for i in range(n):
        outp = os.path.join(TMP, "idle-%d.out" % i)
        p = spawn(WL_PIN + [PYTHON, JOB_PY, "idle", str(IDLE_WORKERS)], stdout=open(outp, "w"),
                  stderr=subprocess.DEVNULL, start_new_session=True)
        p.own_group = True      # its idle workers go with it
        jobs.append((p, outp))
    deadline = time.monotonic() + 300
    for p, outp in jobs:
        while "READY" not in open(outp).read():
            if p.poll() is not None or time.monotonic() > deadline:
                sys.exit("bench_daemon: an idle PyTorch job did not start (needs torch in %s)" % PYTHON)
            time.sleep(0.1)
    return [p for p, _ in jobs]


def idle_window(d, label):
    time.sleep(3)    # past the tracking's first scan and progress check
    a, ma = d.sample(), d.metrics()
    time.sleep(IDLE_SECONDS)
    b, mb = d.sample(), d.metrics()
    ns, ticks = cpu_pct(a, b)
    mpct = metric_cpu_pct(ma, mb, b[0] - a[0])
    rss = proc_status_kib(d.pid, "VmRSS") / 1024
    print("  %-34s %6s %% (schedstat) %6s %% (stat) %6s %% (/metrics) of one core; VmRSS %.1f MiB, "
          "VmHWM %.1f MiB; tracked %s jobs / %s processes; last scan %s ms" % (
              label, fmt(ns, ".3f"), fmt(ticks, ".3f"), fmt(mpct, ".3f"), rss, proc_hwm_kib(d.pid) / 1024,
              fmt(mb.get('hangtrace_tracked{what="jobs"}'), ".0f"),
              fmt(mb.get('hangtrace_tracked{what="processes"}'), ".0f"),
              fmt(mb.get("hangtrace_daemon_scan_seconds", 0) * 1e3, ".2f")), flush=True)
    return ns, ticks, mpct, mb.get('hangtrace_tracked{what="processes"}')


def profile_daemon(d, name):
    """perf record -g of the daemon for PROFILE_SECONDS, in the background."""
    return start_profile(d.pid, PROFILE_SECONDS, os.path.join(TMP, name + ".perf.data"))


def idle():
    print("== idle: %d idle PyTorch jobs of %d processes each (main + %d idle forked workers), %.0f s windows, "
          "daemon on CPU %s" % (IDLE_PROCS, 1 + IDLE_WORKERS, IDLE_WORKERS, IDLE_SECONDS,
                                TRACER_PIN[2] if TRACER_PIN else "-"), flush=True)
    jobs = start_idle_jobs(IDLE_PROCS)
    try:
        d = Daemon([ecma_literal("hangtrace-bench-daemon-matches-nothing")])
        none = idle_window(d, "daemon, nothing tracked")
        d.stop()
        d = Daemon([ecma_literal(JOB_PY + " idle")])
        d.wait_tracking([p.pid for p in jobs])
        some = idle_window(d, "daemon, %d idle torch jobs tracked" % IDLE_PROCS)
        want = IDLE_PROCS * (1 + IDLE_WORKERS)
        if some[3] != want:
            print("  note: the daemon tracks %s processes, %d expected" % (fmt(some[3], ".0f"), want))
        if some[0] is not None and none[0] is not None and IDLE_PROCS:
            print("  per tracked idle process: %.3f %% of one core" % (
                (some[0] - none[0]) / (IDLE_PROCS * (1 + IDLE_WORKERS))))
        hwm = proc_hwm_kib(d.pid) / 1024
        if PROFILE:
            report_profile(profile_daemon(d, "idle"))
        d.stop()
    finally:
        for p in jobs:
            end(p, signal.SIGKILL)
    verdict(none[0] is not None and none[0] <= MAX_CPU_PCT,
            "daemon CPU idle, nothing tracked: %s %% of one core; target <= %.0f %%" % (fmt(none[0], ".3f"), MAX_CPU_PCT))
    verdict(some[0] is not None and some[0] <= MAX_CPU_PCT,
            "daemon CPU idle, %d idle PyTorch jobs tracked: %s %% of one core (stat %s %%, /metrics %s %%); "
            "target <= %.0f %%" % (IDLE_PROCS, fmt(some[0], ".3f"), fmt(some[1], ".3f"), fmt(some[2], ".3f"),
                                   MAX_CPU_PCT))
    verdict(hwm <= MAX_RSS_MIB, "daemon RSS tracking %d idle PyTorch jobs (VmHWM): %.1f MiB; target <= %.0f MiB"
            % (IDLE_PROCS, hwm, MAX_RSS_MIB))
    print()


# ---- soak -----------------------------------------------------------------------------

def slope_kib_min(samples):
    """Theil-Sen slope of (t s, rss KiB) in KiB per minute: the median of the
    pairwise slopes, so that a transient (a bundle's snapshot holds ~15 MiB
    for a few seconds) does not tilt it the way it tilts least squares."""
    pairs = [(r2 - r1) / (t2 - t1) for i, (t1, r1) in enumerate(samples) for t2, r2 in samples[i + 1:] if t2 > t1]
    return med(pairs) * 60 if len(samples) >= 3 and pairs else None


def soak():
    print("== soak: %.0f s of a busy PyTorch job (%d DataLoader workers forked per epoch), a short job every %.0f s; "
          "daemon --recorder-minutes %s, sampled every %.0f s" % (SOAK_SECONDS, SOAK_WORKERS, SOAK_JOB_EVERY,
                                                                  SOAK_RECORDER_MINUTES, SOAK_SAMPLE_S), flush=True)
    if SOAK_SECONDS < 2 * 60 * float(SOAK_RECORDER_MINUTES) + 30:
        print("  note: SOAK_SECONDS < 2 x the recorder window + 30 s: the second half may still see the flight "
              "recorder fill")
    stats_path = os.path.join(TMP, "soak.json")
    d = Daemon([ecma_literal(JOB_PY) + " (soak|short) "], ["--recorder-minutes", SOAK_RECORDER_MINUTES])
    env = dict(os.environ, SOAK_WORKERS=str(SOAK_WORKERS))
    outp = os.path.join(TMP, "soak.out")
    job = spawn(WL_PIN + [PYTHON, "-W", "ignore", JOB_PY, "soak", str(SOAK_SECONDS), stats_path],
                stdout=open(outp, "w"), stderr=open(os.path.join(TMP, "soak.err"), "w"),
                env=env, start_new_session=True)
    job.own_group = True
    shorts = []
    samples = []
    try:
        d.wait_tracking([job.pid], timeout=60)
        t0 = time.monotonic()
        a = d.sample()
        next_sample = next_short = t0
        max_jobs = 0
        prof = None
        while job.poll() is None and time.monotonic() - t0 < SOAK_SECONDS + 120:
            now = time.monotonic()
            if now >= next_short and SOAK_JOB_EVERY > 0:
                shorts.append(spawn(WL_PIN + [PYTHON, JOB_PY, "short", "3"]))
                next_short += SOAK_JOB_EVERY
            if now >= next_sample:
                m = d.metrics()
                samples.append({"t": now - t0, "rss_kib": proc_status_kib(d.pid, "VmRSS"),
                                "hwm_kib": proc_hwm_kib(d.pid),
                                "metrics_rss_kib": m.get("hangtrace_daemon_resident_memory_bytes", 0) / 1024,
                                "jobs": m.get('hangtrace_tracked{what="jobs"}'),
                                "processes": m.get('hangtrace_tracked{what="processes"}'),
                                "events": m.get("hangtrace_events_total"),
                                "dropped": m.get("hangtrace_dropped_events_total"),
                                "cpu_s": m.get("hangtrace_daemon_cpu_seconds_total")})
                max_jobs = max(max_jobs, samples[-1]["jobs"] or 0)
                next_sample += SOAK_SAMPLE_S
            for s in shorts:
                s.poll()
            if PROFILE and prof is None and now - t0 >= max(0, SOAK_SECONDS - PROFILE_SECONDS - 5):
                prof = profile_daemon(d, "soak")    # the soak's last PROFILE_SECONDS
            time.sleep(0.2)
        b = d.sample()
        rc = job.wait(30) if job.poll() is None else job.returncode
        end(job, signal.SIGKILL)
        for s in shorts:
            end(s, signal.SIGKILL)
        if prof:
            prof.wait()
        m = d.metrics()
        hwm = proc_hwm_kib(d.pid) / 1024
        d.stop()
    finally:
        end(job, signal.SIGKILL)
    with open(os.path.join(TMP, "samples.json"), "w") as f:
        json.dump(samples, f)
    if rc != 0:
        sys.exit("bench_daemon: the soak job failed (exit %s): %s" % (
            rc, open(os.path.join(TMP, "soak.err")).read()[-500:]))
    st = json.load(open(stats_path))
    ns, ticks = cpu_pct(a, b)
    rss = [s["rss_kib"] for s in samples]
    half = [(s["t"], s["rss_kib"]) for s in samples if s["t"] >= samples[-1]["t"] / 2]
    slope = slope_kib_min(half)
    equiv = st["epochs"] * REAL_EPOCH_MIN
    print("  the job: %.0f s, %d epochs (%.2f s each), %d worker processes forked, %d short-lived threads, "
          "%d waits > 1 s, %d RSS steps of %s MiB; %d short jobs besides"
          % (st["seconds"], st["epochs"], st["seconds"] / max(1, st["epochs"]), st["workers"], st["threads"],
             st["long_waits"], st["rss_steps"], os.environ.get("SOAK_RSS_MIB", "160"), len(shorts)))
    print("  compression: a real job forks its %d workers every %.0f min, the soak every %.2f s: x%.0f; the soak "
          "stands for %.0f min (%.1f h) of a real job's worker churn"
          % (SOAK_WORKERS, REAL_EPOCH_MIN, st["seconds"] / max(1, st["epochs"]),
             REAL_EPOCH_MIN * 60 / (st["seconds"] / max(1, st["epochs"])), equiv, equiv / 60))
    print("  daemon VmRSS: first %.1f, median %.1f, last %.1f, max %.1f MiB; VmHWM %.1f MiB; /metrics resident "
          "last %.1f MiB" % (rss[0] / 1024, med(rss) / 1024, rss[-1] / 1024, max(rss) / 1024, hwm,
                             samples[-1]["metrics_rss_kib"] / 1024))
    print("  second half (%d samples, %.0f..%.0f s): slope %s KiB/min (Theil-Sen); %.1f -> %.1f MiB" % (
        len(half), half[0][0], half[-1][0], fmt(slope, "+.1f"), half[0][1] / 1024, half[-1][1] / 1024))
    print("  daemon CPU over the soak: %s %% of one core (schedstat; stat %s %%); events %.0f, dropped %.0f; "
          "up to %d jobs tracked at once"
          % (fmt(ns, ".2f"), fmt(ticks, ".2f"), m.get("hangtrace_events_total", 0),
             m.get("hangtrace_dropped_events_total", 0), max_jobs))
    print("  (flight recorder sizes: not on /metrics)")
    if prof:
        print("  (PROFILE=1: perf sampled the daemon over the last %.0f s: the CPU figure above includes its cost)"
              % PROFILE_SECONDS)
        report_profile(prof)
    step = max(1, len(samples) // 12)
    print("  samples:  t_s  rss_MiB  jobs  procs   events  dropped")
    for s in samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else []):
        print("         %5.0f  %7.1f  %4s  %5s  %7s  %7s" % (
            s["t"], s["rss_kib"] / 1024, fmt(s["jobs"], ".0f"), fmt(s["processes"], ".0f"),
            fmt(s["events"], ".0f"), fmt(s["dropped"], ".0f")))
    written = [", ".join(m) for m in re.findall(r"bundle written: \S+ \(([^,]+), ([^:]+):", d.log())]
    print("  bundles written for this healthy job: %d%s" % (len(written), (": " + "; ".join(written)) if written else ""))
    print("  daemon log lines: %d \"capturing a bundle\", %d \"was bundled before\""
          % (d.log().count("capturing a bundle"), d.log().count("was bundled before")))
    verdict(equiv >= MIN_SOAK_EQUIV_MIN, "soak stands for %.0f min of a real job (%d epochs x %.0f min); target >= %.0f min"
            % (equiv, st["epochs"], REAL_EPOCH_MIN, MIN_SOAK_EQUIV_MIN))
    verdict(slope is not None and slope <= SOAK_MAX_SLOPE,
            "soak: daemon RSS flat: second-half slope %s KiB/min; target <= %.0f KiB/min" % (fmt(slope, "+.1f"),
                                                                                           SOAK_MAX_SLOPE))
    verdict(hwm <= MAX_RSS_MIB, "soak: daemon RSS (VmHWM): %.1f MiB; target <= %.0f MiB" % (hwm, MAX_RSS_MIB))
    verdict(not written, "soak: no bundle for the healthy busy job: %d written (a false alarm costs a person's time)"
            % len(written))
    verdict(ns is not None and ns <= MAX_CPU_PCT, "soak: daemon CPU tracking the busy job: %s %% of one core; "
            "target <= %.0f %%" % (fmt(ns, ".2f"), MAX_CPU_PCT))
    print()


def foreign_tracing_progs():
    """BPF programs on tracepoints, kprobes, raw/BTF tracepoints loaded now (other
    tools' run on every event the workloads make too: the baseline is not clean)."""
    try:
        progs = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True,
                                          timeout=30).stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return sum(1 for p in progs if p.get("type") in ("tracepoint", "kprobe", "raw_tracepoint", "tracing",
                                                        "perf_event"))


def host_line(when):
    n = foreign_tracing_progs()
    print("%s: load %s; %s tracing BPF programs loaded by others%s" % (
        when, open("/proc/loadavg").read().split()[0], fmt(n, "d", "?"),
        " (the baseline pays for them too: quote ratios from a quiet machine)" if n else ""), flush=True)


signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
t_start = time.monotonic()
print("host: %d CPUs, kernel %s; hangtrace %s; %s" % (
    os.cpu_count(), os.uname().release, HT, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())), flush=True)
host_line("start")
status = 0
try:
    if "overhead" in SECTIONS:
        overhead()
    if "train" in SECTIONS:
        train()
    if "idle" in SECTIONS:
        idle()
    if "soak" in SECTIONS:
        soak()
except HangtraceFailed as e:
    print("bench_daemon: hangtrace failed: %s" % e, file=sys.stderr)
    status = 1
finally:
    kill_started()
host_line("end")
if VERDICTS:
    print("summary (targets of the always-on daemon issue; %.0f s in all):" % (time.monotonic() - t_start))
    for v in VERDICTS:
        print("  " + v)
sys.exit(status)
EOF
