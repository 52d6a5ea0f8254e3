#!/usr/bin/env bash
# Benchmark (not a test): does `hangtrace daemon` stay flat -- metric series,
# CPU, memory -- with 1,000 tracked processes on a host, and does `hangtrace
# merge` of one job's 64 rank bundles take seconds? (Issue 21, item 5.)
#
# Two sections (SECTIONS, comma-separated; default both):
#
# tracked   Idle PyTorch-like jobs (scripts/bench_daemon_job.py idle: torch
#           imported, a matmul run, forked children waiting like idle
#           DataLoader workers: they share the parent's memory, ~1-4 MiB each),
#           started once for the largest N of SCALE and alive through every
#           configuration. Processes are grouped by a tag in their command
#           line, so that --match picks exactly N of them: the N of each step
#           of SCALE are made of jobs of at most PROCS_PER_JOB processes
#           (main + workers). Configurations, one fresh daemon each
#           (`hangtrace daemon --match PATTERN --metrics 127.0.0.1:0
#           --bundle-dir TMP`, defaults otherwise), on the tracers' CPU:
#             none   matching nothing, the same processes alive (the baseline:
#                    the /proc scan reads every process anyway)
#             N      tracking the N processes of the first groups, for each N
#                    of SCALE
#           Each waits until /metrics says hangtrace_tracked{what="processes"}
#           == N, then SETTLE s (the maps of a new process are read at doubling
#           intervals, 0.25 s up to 30 s: steady after ~32 s), then measures
#           over WINDOW s: the daemon's CPU as % of one core
#           (/proc/PID/task/*/schedstat; also /proc/PID/stat and its own
#           hangtrace_daemon_cpu_seconds_total), VmHWM and VmRSS, the series
#           on /metrics (non-comment lines) in all and by family, events and
#           dropped, and from /metrics every SCRAPE_S s the last scan's time
#           (hangtrace_daemon_scan_seconds) and the last sampled pass's time
#           and threads (hangtrace_daemon_sample). A table with ratios against
#           the smallest N. With PROFILE=1 also a `perf record -g` of the
#           daemon tracking the largest N (PROFILE_SECONDS) and the top of
#           `perf report` (needs perf: linux-perf).
# merge     One job's 64 rank bundles (MERGE_RANKS). Real bundles first: the
#           two-rank gloo job of the scenarios
#           (tests/scenarios/workloads/gloo_allreduce_skip.py: rank 1 leaves
#           the loop, rank 0 waits in all_reduce) under `hangtrace daemon
#           --hang-after MERGE_HANG_AFTER`, which writes a hang bundle per
#           rank. Then MERGE_RANKS copies derived from those two: rank
#           MERGE_SKIP_RANK from rank 1's bundle, every other rank from rank
#           0's, each with its rank and WORLD_SIZE rewritten where merge reads
#           them (meta.json: rank, world_size, hostname; snapshot.json: the
#           rank process's rank, world_size and the snapshot's hostname) and a
#           host of its own (bench-node-NN); every other byte is the real
#           bundle's. They go into one directory that a daemon with
#           --serve-bundles --keep 1000 serves; the 64 archives are fetched from
#           it (GET /bundles/NAME, as `curl -o`). Timed, MERGE_REPS runs each,
#           median wall time, CPU and peak RSS (GNU time %M):
#             dirs      hangtrace merge DIR/*  --json FILE   (64 directories)
#             archives  hangtrace merge *.tar  --json FILE   (64 archives)
#             http      hangtrace merge http://ADDR --json FILE (the daemon)
#           and side by side the floors: reading the same bytes (`cat` of every
#           file of the 64 directories; `cat` of the archives; `tar -xf` of
#           each archive; a GET of each archive from the daemon), with the
#           ratio merge / floor. The merged verdict is checked: a hang, rank
#           MERGE_SKIP_RANK absent, MERGE_RANKS ranks merged.
#
# Targets (printed next to each figure, PASS/FAIL; they do not change the exit
# status): series(N max) / series(N min) == 1.0 (no pid or tid labels: the only
# family that grows with jobs is hangtrace_job_hung, one series per job hung
# now, removed when it is no longer hung; none is hung here); the daemon's CPU
# tracking the largest N <= 1 % of one core; its VmHWM <= 64 MiB; merge of the
# 64 bundles <= 5 s, from directories, archives and a daemon alike.
#
# Env: HANGTRACE_BIN (./build/hangtrace), PYTHON (/usr/bin/python3), SECTIONS
#      (tracked,merge), SCALE ("10 100 1000"), PROCS_PER_JOB (50), SETTLE (40),
#      WINDOW (60), SCRAPE_S (10), PROFILE (0), PROFILE_SECONDS (30),
#      MERGE_RANKS (64), MERGE_SKIP_RANK (37), MERGE_HANG_AFTER (10),
#      MERGE_REPS (3), PIN (1: the jobs on the last CPU, the daemon on the
#      others), KEEP (keep the temp dir: daemon logs, bundles, perf data).
#      A quick trial: SCALE="10 50" SETTLE=5 WINDOW=10 MERGE_RANKS=8 MERGE_SKIP_RANK=3 MERGE_REPS=1.
# Needs root (BPF) and PyTorch in $PYTHON. A daemon that fails to start, to
# track the processes or to serve /metrics, a job that does not start, or a
# merge that fails fails the run (exit 1).
set -euo pipefail

HANGTRACE_BIN=${HANGTRACE_BIN:-./build/hangtrace}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "bench_fleet: $*" >&2; exit 1; }
# shellcheck source=scripts/bench_lib.sh
source "$HERE/bench_lib.sh"
[[ $(id -u) -eq 0 ]] || die "needs root (BPF)"
command -v "$PYTHON" >/dev/null || die "needs $PYTHON"
[[ -x $HANGTRACE_BIN ]] || die "no hangtrace binary at $HANGTRACE_BIN (set HANGTRACE_BIN)"
[[ -x /usr/bin/time ]] || die "needs /usr/bin/time (GNU time) for merge's peak RSS"

tmp=$(mktemp -d /tmp/hangtrace-bench-fleet.XXXXXX)
cleanup() {
  if [[ -z ${KEEP:-} ]]; then rm -rf "$tmp"; else echo "kept $tmp" >&2; fi
}
trap cleanup EXIT

echo "uptime at start: $(uptime)"
export PYTHON
HANGTRACE_BIN=$(realpath -m "$HANGTRACE_BIN") BENCH_TMP=$tmp JOB_PY=$HERE/bench_daemon_job.py \
  GLOO_PY=$HERE/../tests/scenarios/workloads/gloo_allreduce_skip.py \
  BENCH_LIB_DIR=$BENCH_LIB_DIR "$PYTHON" - <<'EOF'
import glob, json, os, re, shutil, signal, subprocess, sys, time, urllib.request
sys.path.insert(0, os.environ["BENCH_LIB_DIR"])
from bench_lib import (VERDICTS, HangtraceDaemon, HangtraceFailed, cpu_pct, ecma_literal, end, fmt, kill_started,
                       med, metric_cpu_pct, pins, proc_hwm_kib, proc_status_kib, report_profile, series_by_family,
                       spawn, start_profile, time_rss, verdict)

TMP = os.environ["BENCH_TMP"]
HT = os.environ["HANGTRACE_BIN"]
JOB_PY = os.environ["JOB_PY"]
GLOO_PY = os.path.realpath(os.environ["GLOO_PY"])
PYTHON = os.environ["PYTHON"]
E = os.environ.get
SECTIONS = [s.strip() for s in E("SECTIONS", "tracked,merge").split(",") if s.strip()]
SCALE = sorted({int(n) for n in E("SCALE", "10 100 1000").split()})
PROCS_PER_JOB = int(E("PROCS_PER_JOB", "50"))
SETTLE = float(E("SETTLE", "40"))
WINDOW = float(E("WINDOW", "60"))
SCRAPE_S = float(E("SCRAPE_S", "10"))
PROFILE = E("PROFILE", "0") == "1"
PROFILE_SECONDS = float(E("PROFILE_SECONDS", "30"))
MERGE_RANKS = int(E("MERGE_RANKS", "64"))
MERGE_SKIP_RANK = int(E("MERGE_SKIP_RANK", "37"))
MERGE_HANG_AFTER = E("MERGE_HANG_AFTER", "10")
MERGE_REPS = int(E("MERGE_REPS", "3"))
# The issue's targets.
MAX_CPU_PCT, MAX_RSS_MIB, MAX_MERGE_S = 1.0, 64.0, 5.0
# What one tracked idle process costs in memory, for the check before they
# start: a job's main process with torch imported has ~4 MiB anonymous memory
# of its own and shares ~110 MiB of file pages; a forked worker ~1.5 MiB.
# Rounded up, to leave room for whatever else runs.
JOB_MIB, WORKER_MIB = 64, 4

PIN_CPU, TRACER_PIN = pins()
WL_PIN = ["taskset", "-c", str(PIN_CPU)] if PIN_CPU is not None else []
for s in SECTIONS:
    if s not in ("tracked", "merge"):
        sys.exit("bench_fleet: SECTIONS: no section %r (have: tracked, merge)" % s)
if not SCALE or SCALE[0] <= 0:
    sys.exit("bench_fleet: SCALE: give process counts > 0")
if not 0 <= MERGE_SKIP_RANK < MERGE_RANKS:
    sys.exit("bench_fleet: MERGE_SKIP_RANK must be a rank below MERGE_RANKS")


def mem_available_mib():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


# ---- tracked ----------------------------------------------------------------------------

def plan_groups():
    """[(group tag, [processes per job])]: group k brings the processes from
    SCALE[k-1] to SCALE[k], in jobs of at most PROCS_PER_JOB."""
    groups, prev = [], 0
    for k, n in enumerate(SCALE):
        count = n - prev
        jobs = -(-count // PROCS_PER_JOB)
        sizes = [count // jobs + (1 if i < count % jobs else 0) for i in range(jobs)]
        groups.append(("fleet-g%d" % k, sizes))
        prev = n
    return groups


def start_fleet(groups):
    jobs = []
    for tag, sizes in groups:
        for size in sizes:
            outp = os.path.join(TMP, "idle-%d.out" % len(jobs))
            p = spawn(WL_PIN + [PYTHON, JOB_PY, "idle", str(size - 1), tag], stdout=open(outp, "w"),
                      stderr=open(outp + ".err", "w"), own_group=True)
            jobs.append((p, outp))
            time.sleep(0.5)   # imports overlap, but not all at once
    deadline = time.monotonic() + 600
    for p, outp in jobs:
        while "READY" not in open(outp).read():
            if p.poll() is not None or time.monotonic() > deadline:
                sys.exit("bench_fleet: an idle PyTorch job did not start (needs torch in %s): %s"
                         % (PYTHON, open(outp + ".err").read()[-300:]))
            time.sleep(0.2)
    return [p for p, _ in jobs]


def count_alive(pattern):
    return sum(1 for pid in os.listdir("/proc") if pid.isdigit() and pattern in _cmdline(int(pid)))


def _cmdline(pid):
    try:
        return open("/proc/%d/cmdline" % pid, "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_tracked(d, want, timeout=180):
    deadline = time.monotonic() + timeout
    while True:
        m = d.metrics()
        got = m.get('hangtrace_tracked{what="processes"}')
        if got == want:
            return m
        if d.proc.poll() is not None:
            raise HangtraceFailed("hangtrace daemon exited (%s): %s" % (d.proc.returncode, d.tail()))
        if time.monotonic() > deadline:
            raise HangtraceFailed("the daemon tracks %s processes after %.0f s, %d expected: %s"
                                  % (fmt(got, ".0f"), timeout, want, d.tail()))
        time.sleep(0.5)


def measure(label, pattern, want):
    """One daemon matching `pattern`, once it tracks `want` processes: its
    figures over WINDOW."""
    d = HangtraceDaemon(HT, TMP, [pattern], pin=TRACER_PIN, name="daemon-" + label)
    t0 = time.monotonic()
    wait_tracked(d, want)
    t_tracked = time.monotonic() - t0
    w0 = d.sample()
    time.sleep(SETTLE)
    a, ma = d.sample(), d.metrics()
    settle_cpu = cpu_pct(w0, a)[0]
    scans, passes, threads = [], [], []
    prof = start_profile(d.pid, PROFILE_SECONDS, os.path.join(TMP, "tracked-%s.perf.data" % label)) \
        if PROFILE and want == SCALE[-1] else None
    end_at = a[0] + WINDOW
    while time.monotonic() < end_at:
        time.sleep(min(SCRAPE_S, max(0, end_at - time.monotonic())))
        m = d.metrics()
        scans.append(m.get("hangtrace_daemon_scan_seconds"))
        passes.append(m.get('hangtrace_daemon_sample{what="seconds"}'))
        threads.append(m.get('hangtrace_daemon_sample{what="threads"}'))
    b = d.sample()
    text = d.metrics_text()
    mb = d.metrics()
    ns, ticks = cpu_pct(a, b)
    total, families = series_by_family(text)
    r = {"label": label, "want": want, "cpu": ns, "cpu_stat": ticks, "cpu_metrics": metric_cpu_pct(ma, mb, b[0] - a[0]),
         "settle_cpu": settle_cpu, "t_tracked": t_tracked,
         "hwm": proc_hwm_kib(d.pid) / 1024, "rss": proc_status_kib(d.pid, "VmRSS") / 1024,
         "series": total, "families": families,
         "jobs": mb.get('hangtrace_tracked{what="jobs"}'), "procs": mb.get('hangtrace_tracked{what="processes"}'),
         "events": mb.get("hangtrace_events_total"), "dropped": mb.get("hangtrace_dropped_events_total"),
         "scan_ms": med(scans) * 1e3 if med(scans) is not None else None,
         "scan_max_ms": max([s for s in scans if s is not None], default=0) * 1e3,
         "pass_ms": med(passes) * 1e3 if med(passes) is not None else None,
         "threads": med(threads), "hang_bundles": d.log().count("bundle written:")}
    with open(os.path.join(TMP, "metrics-%s.txt" % label), "w") as f:
        f.write(text)
    print("  %-6s tracked %s jobs / %s processes (after %.1f s); CPU %s %% of one core over %.0f s (stat %s %%, "
          "/metrics %s %%; %s %% in the %.0f s before); VmHWM %.1f MiB; %d series" % (
              label, fmt(r["jobs"], ".0f"), fmt(r["procs"], ".0f"), t_tracked, fmt(ns, ".3f"), WINDOW,
              fmt(ticks, ".3f"), fmt(r["cpu_metrics"], ".3f"), fmt(settle_cpu, ".3f"), SETTLE, r["hwm"], total),
          flush=True)
    if prof:
        report_profile(prof)
    d.stop()
    return r


def tracked():
    groups = plan_groups()
    n_jobs = sum(len(s) for _, s in groups)
    need = n_jobs * JOB_MIB + (SCALE[-1] - n_jobs) * WORKER_MIB
    avail = mem_available_mib()
    print("== tracked: %d idle PyTorch processes in %d jobs (main + forked workers, at most %d per job), alive "
          "through every configuration; the daemon on CPU %s, the jobs on CPU %s; settle %.0f s, window %.0f s"
          % (SCALE[-1], n_jobs, PROCS_PER_JOB, TRACER_PIN[2] if TRACER_PIN else "-", PIN_CPU, SETTLE, WINDOW),
          flush=True)
    print("  memory: %.0f MiB available, ~%d MiB needed (%d MiB per job, %d per worker, rounded up)"
          % (avail, need, JOB_MIB, WORKER_MIB))
    if need > avail * 0.8:
        sys.exit("bench_fleet: not enough memory for %d processes: ~%d MiB needed, %.0f MiB available"
                 % (SCALE[-1], need, avail))
    t0 = time.monotonic()
    jobs = start_fleet(groups)
    alive = count_alive("bench_daemon_job.py idle ")
    print("  %d processes up in %.0f s (%d counted in /proc); memory available now %.0f MiB (%.0f MiB used by them); "
          "load %s" % (SCALE[-1], time.monotonic() - t0, alive, mem_available_mib(), avail - mem_available_mib(),
                       load()), flush=True)
    results = []
    try:
        results.append(measure("none", ecma_literal("hangtrace-bench-fleet-matches-nothing"), 0))
        for k, n in enumerate(SCALE):
            tags = "|".join(tag for tag, _ in groups[:k + 1])
            results.append(measure(str(n), ecma_literal(JOB_PY + " idle ") + r"\d+ (%s)$" % tags, n))
    finally:
        for p in jobs:
            end(p, signal.SIGKILL)
    none, runs = results[0], results[1:]
    base = runs[0]

    def ratio(a, b):
        return a / b if a is not None and b else None

    print()
    print("  | tracked processes | jobs | threads sampled | CPU % of one core | - none | per process | ratio | "
          "VmHWM MiB | ratio | series | ratio | scan ms | pass ms | events | dropped |")
    print("  |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        extra = r["cpu"] - none["cpu"] if r["cpu"] is not None and none["cpu"] is not None else None
        per = extra / r["want"] if extra is not None and r["want"] else None
        print("  | %s | %s | %s | %s | %s | %s | %s | %.1f | %s | %d | %s | %s | %s | %s | %s |" % (
            "none (baseline, %d alive)" % SCALE[-1] if r is none else r["want"], fmt(r["jobs"], ".0f"),
            fmt(r["threads"], ".0f"), fmt(r["cpu"], ".3f"), fmt(extra, "+.3f") if r is not none else "",
            fmt(per, ".5f") if r is not none else "",
            fmt(ratio(r["cpu"], base["cpu"]), ".2f") + "x" if r is not none else "", r["hwm"],
            fmt(ratio(r["hwm"], base["hwm"]), ".2f") + "x" if r is not none else "", r["series"],
            fmt(ratio(r["series"], base["series"]), ".2f") + "x" if r is not none else "",
            fmt(r["scan_ms"], ".1f"), fmt(r["pass_ms"], ".2f"), fmt(r["events"], ".0f"), fmt(r["dropped"], ".0f")))
    fams = sorted(set().union(*(r["families"] for r in results)),
                  key=lambda f: -max(r["families"].get(f, 0) for r in results))
    print()
    print("  series by family: %s" % " | ".join(["family"] + [r["label"] for r in results]))
    grown = []
    for f in fams:
        counts = [r["families"].get(f, 0) for r in results]
        if counts[1] != counts[-1]:
            grown.append(f)
        print("    %-42s %s" % (f, "  ".join("%5d" % c for c in counts)))
    print("  families whose series differ between N=%d and N=%d: %s" % (
        SCALE[0], SCALE[-1], ", ".join(grown) if grown else "none"))
    if any(r["hang_bundles"] for r in results):
        print("  note: bundles written for the idle jobs: %s" % [r["hang_bundles"] for r in results])
    top = runs[-1]
    verdict(top["series"] == base["series"],
            "series on /metrics, %d vs %d tracked processes: %d vs %d (%.2fx); target 1.00x (no pid/tid labels)"
            % (top["want"], base["want"], top["series"], base["series"], ratio(top["series"], base["series"])))
    verdict(top["cpu"] is not None and top["cpu"] <= MAX_CPU_PCT,
            "daemon CPU tracking %d idle processes: %s %% of one core (%s %% with none tracked, %s %% per tracked "
            "process); target <= %.0f %%" % (
                top["want"], fmt(top["cpu"], ".3f"), fmt(none["cpu"], ".3f"),
                fmt((top["cpu"] - none["cpu"]) / top["want"] if top["cpu"] is not None and none["cpu"] is not None
                    else None, ".5f"), MAX_CPU_PCT))
    verdict(top["hwm"] <= MAX_RSS_MIB, "daemon VmHWM tracking %d processes: %.1f MiB (%.1f MiB at %d); target <= "
            "%.0f MiB" % (top["want"], top["hwm"], base["hwm"], base["want"], MAX_RSS_MIB))
    verdict(all((r["dropped"] or 0) == 0 for r in results), "dropped events: %s; target 0"
            % ", ".join(fmt(r["dropped"], ".0f") for r in results))
    print()


# ---- merge ------------------------------------------------------------------------------

def real_bundles():
    """Two real hang bundles of the gloo job, one per rank: {rank: dir}."""
    src = os.path.join(TMP, "real-bundles")
    outp = os.path.join(TMP, "gloo.out")
    job = spawn([PYTHON, GLOO_PY], stdout=open(outp, "w"), stderr=open(outp + ".err", "w"), own_group=True)
    deadline = time.monotonic() + 180
    while "READY" not in open(outp).read():
        if job.poll() is not None or time.monotonic() > deadline:
            sys.exit("bench_fleet: the gloo job did not start: %s" % open(outp + ".err").read()[-400:])
        time.sleep(0.2)
    t0 = time.monotonic()
    d = HangtraceDaemon(HT, TMP, [ecma_literal(GLOO_PY) + " rank "], bundle_dir=src, pin=TRACER_PIN,
                        extra=["--hang-after", MERGE_HANG_AFTER], name="daemon-gloo")
    try:
        while len(re.findall(r"bundle written: ", d.log())) < 2:
            if d.proc.poll() is not None or time.monotonic() - t0 > 180:
                raise HangtraceFailed("the daemon wrote no hang bundle for both gloo ranks in 180 s: %s" % d.tail())
            time.sleep(0.5)
        d.stop()
    finally:
        end(job, signal.SIGKILL)
    out = {}
    for dir_ in glob.glob(os.path.join(src, "*")):
        meta = json.load(open(os.path.join(dir_, "meta.json")))
        out[meta.get("rank")] = dir_
    if sorted(k for k in out if k is not None) != [0, 1]:
        raise HangtraceFailed("expected hang bundles of ranks 0 and 1, got %s" % out)
    print("  real bundles (%.0f s after the job was in place): %s" % (
        time.monotonic() - t0, "; ".join("rank %d: %s (%s)" % (k, os.path.basename(v), json.load(
            open(os.path.join(v, "meta.json"))).get("cause")) for k, v in sorted(out.items()))), flush=True)
    return out


def derive(real, dest):
    """MERGE_RANKS bundles of one job in dest, derived from the two real ones."""
    os.makedirs(dest)
    for rank in range(MERGE_RANKS):
        src_rank = 1 if rank == MERGE_SKIP_RANK else 0
        src = real[src_rank]
        host = "bench-node-%02d" % rank
        meta = json.load(open(os.path.join(src, "meta.json")))
        name = os.path.basename(src).replace(meta["hostname"], host, 1)
        if name == os.path.basename(src):
            name += "-" + host
        out = os.path.join(dest, name)
        shutil.copytree(src, out)
        meta.update(rank=rank, world_size=MERGE_RANKS, hostname=host)
        with open(os.path.join(out, "meta.json"), "w") as f:
            json.dump(meta, f, indent=2)
        snap_path = os.path.join(out, "snapshot.json")
        snap = json.load(open(snap_path))
        changed = 0
        for p in snap.get("processes", []):
            if p.get("rank") == src_rank:
                p["rank"], p["world_size"] = rank, MERGE_RANKS
                changed += 1
        if changed == 0:
            raise HangtraceFailed("no process of rank %d in %s" % (src_rank, snap_path))
        if "hostname" in snap:
            snap["hostname"] = host
        with open(snap_path, "w") as f:
            json.dump(snap, f, indent=1)


def fetch_archives(d, dest):
    os.makedirs(dest)
    index = json.loads(urllib.request.urlopen("http://%s/bundles" % d.address, timeout=30).read())
    names = [b["name"] for b in index["bundles"]]
    t0 = time.perf_counter()
    for n in names:
        data = urllib.request.urlopen("http://%s/bundles/%s" % (d.address, n), timeout=300).read()
        with open(os.path.join(dest, n + ".tar"), "wb") as f:
            f.write(data)
    return names, time.perf_counter() - t0


def timed(argv, reps=None):
    runs = time_rss(argv, reps or MERGE_REPS)
    return {"wall": med([r[0] for r in runs]), "min": min(r[0] for r in runs), "max": max(r[0] for r in runs),
            "cpu": med([r[1] for r in runs]), "rss": max(r[2] for r in runs) / 1024}


def check_merged(json_path, what):
    try:
        rep = json.load(open(json_path))
    except (OSError, ValueError) as e:
        raise HangtraceFailed("merge of the %s wrote no JSON report: %s" % (what, e))
    job = rep["jobs"][0] if rep.get("jobs") else {}
    ok = (rep.get("verdict", {}).get("status") == "hang" and len(job.get("ranks", [])) == MERGE_RANKS
          and [a.get("rank") for a in job.get("absent", [])] == [MERGE_SKIP_RANK])
    print("  merge of the %s: %d bundles, %d ranks, verdict: %s" % (
        what, len(rep.get("bundles", [])), len(job.get("ranks", [])), rep.get("verdict", {}).get("summary", "?")))
    if not ok:
        raise HangtraceFailed("merge of the %s: expected a hang with rank %d absent among %d ranks"
                              % (what, MERGE_SKIP_RANK, MERGE_RANKS))


def merge():
    print("== merge: %d rank bundles of one job (derived from a real two-rank gloo job's hang bundles), %d runs each"
          % (MERGE_RANKS, MERGE_REPS), flush=True)
    real = real_bundles()
    served = os.path.join(TMP, "served")
    derive(real, served)
    dirs = sorted(glob.glob(os.path.join(served, "*")))
    files = sorted(f for d_ in dirs for f in glob.glob(os.path.join(d_, "*")))
    nbytes = sum(os.path.getsize(f) for f in files)
    per = {os.path.basename(f): os.path.getsize(f) for f in glob.glob(os.path.join(dirs[0], "*"))}
    print("  %d bundle directories, %d files, %.1f MiB (one bundle: %s)" % (
        len(dirs), len(files), nbytes / 2**20,
        ", ".join("%s %.0f KiB" % (k, v / 1024) for k, v in sorted(per.items(), key=lambda kv: -kv[1]))))
    d = HangtraceDaemon(HT, TMP, [ecma_literal("hangtrace-bench-fleet-matches-nothing")], bundle_dir=served,
                        pin=TRACER_PIN, extra=["--serve-bundles", "--keep", "1000"], name="daemon-serve")
    results = {}
    try:
        names, get_s = fetch_archives(d, os.path.join(TMP, "archives"))
        if len(names) != MERGE_RANKS:
            raise HangtraceFailed("the daemon serves %d bundles, %d expected" % (len(names), MERGE_RANKS))
        tars = sorted(glob.glob(os.path.join(TMP, "archives", "*.tar")))
        tar_bytes = sum(os.path.getsize(t) for t in tars)
        print("  %d archives fetched from http://%s/bundles: %.1f MiB in %.2f s" % (
            len(tars), d.address, tar_bytes / 2**20, get_s), flush=True)
        out_json = os.path.join(TMP, "merged.json")
        url = "http://%s" % d.address
        for key, what, argv in (("dirs", "directories", [HT, "merge"] + dirs),
                                ("archives", "archives", [HT, "merge"] + tars),
                                ("http", "daemon's bundles", [HT, "merge", url])):
            full = argv + ["--json", out_json]
            subprocess.run(full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)   # warm, and checked
            check_merged(out_json, what)
            results[key] = timed(full)
        untar = os.path.join(TMP, "untar")
        floors = {
            "dirs": ("cat of every file", timed(["cat"] + files)),
            "archives": ("cat of every archive", timed(["cat"] + tars)),
            "archives-x": ("tar -xf of every archive", timed(
                ["sh", "-c", 'rm -rf "$0" && mkdir "$0" && for t in "$@"; do tar -xf "$t" -C "$0"; done', untar]
                + tars)),
            "http": ("GET of every archive", timed(["sh", "-c", 'for n in "$@"; do curl -sf -o /dev/null "$0/bundles/$n" '
                                                    '|| exit 1; done', url] + names)
                     if shutil.which("curl") else None),
        }
        d.stop()
    finally:
        if d.proc.poll() is None:
            end(d.proc)
    print()
    print("  | source | merge (median of %d) | min-max | CPU | peak RSS | floor: reading the same bytes | floor | "
          "merge / floor |" % MERGE_REPS)
    print("  |---|---|---|---|---|---|---|---|")
    rows = (("%d directories" % MERGE_RANKS, "dirs", "dirs"),
            ("%d archives (.tar)" % MERGE_RANKS, "archives", "archives"),
            ("(the same archives)", "archives", "archives-x"),
            ("daemon URL (%d archives over HTTP)" % MERGE_RANKS, "http", "http"))
    for title, key, fkey in rows:
        m = results.get(key)
        shown = m if fkey != "archives-x" else None
        fl = floors.get(fkey)
        fname, f = fl if fl else ("-", None)
        print("  | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            title, "%.2f s" % shown["wall"] if shown else "", "%.2f-%.2f s" % (shown["min"], shown["max"]) if shown
            else "", "%.2f s" % shown["cpu"] if shown else "", "%.0f MiB" % shown["rss"] if shown else "", fname,
            "%.3f s" % f["wall"] if f else "-", "%.1fx" % (m["wall"] / f["wall"]) if m and f and f["wall"] else "-"))
    for key, what in (("dirs", "directories"), ("archives", "archives"), ("http", "a daemon's URL")):
        verdict(results[key]["wall"] <= MAX_MERGE_S, "merge of %d bundles from %s: %.2f s (peak RSS %.0f MiB); "
                "target <= %.0f s" % (MERGE_RANKS, what, results[key]["wall"], results[key]["rss"], MAX_MERGE_S))
    print()


signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
t_start = time.monotonic()
print("host: %d CPUs, kernel %s; hangtrace %s; %s; load %s" % (
    os.cpu_count(), os.uname().release, HT, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load()), flush=True)
status = 0
try:
    if "tracked" in SECTIONS:
        tracked()
    if "merge" in SECTIONS:
        merge()
except HangtraceFailed as e:
    print("bench_fleet: hangtrace failed: %s" % e, file=sys.stderr)
    status = 1
finally:
    kill_started()
print("end: load %s" % load())
if VERDICTS:
    print("summary (issue 21 item 5, fleet scale; %.0f s in all):" % (time.monotonic() - t_start))
    for v in VERDICTS:
        print("  " + v)
sys.exit(status)
EOF
echo "uptime at end: $(uptime)"
