#!/usr/bin/env bash
# GPU check (issue 5): hangtrace against a small CUDA program (scripts/gpu_check/gpu_check.cu) on a real GPU.
#   healthy        kernels launched and synchronized every few ms   -> no gpu-* finding, verdict not "hang"
#   starved        the thread feeding the GPU blocks on a lock held
#                  by a thread blocked on a pipe read: the GPU idles -> gpu-starved naming the feeder thread
#   spin           a kernel spins for minutes while the host busy-
#                  waits in cudaDeviceSynchronize (CUDA's default)   -> gpu-wait naming the syncing thread
#   spin-blocking  the same with cudaDeviceScheduleBlockingSync      -> gpu-wait naming the syncing thread
# Needs root (BPF). Builds hangtrace into $BUILD_DIR (default ./build) unless HANGTRACE_BIN is set; the CUPTI
# injection library is $BUILD/lib/libhangtrace_cupti.so unless HANGTRACE_CUPTI_LIB is set. Everything else the
# run makes goes under a fresh temp dir (GPU_CHECK_DIR overrides), printed first.
# Exit status: 0 every case passed, 1 a case failed or setup failed, 2 no GPU on this machine.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
marker_timeout_s=90
spin_age_s=15  # the synchronize must have lasted a while before hangtrace looks, or it is not a hang yet

if [[ -n ${GPU_CHECK_DIR:-} ]]; then
  work=$GPU_CHECK_DIR
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/hangtrace-gpu-check.XXXXXX)
fi
echo "gpu-check: files of this run are in $work"

children=()
kill_children() {
  local pid
  for pid in "${children[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}
trap kill_children EXIT
trap 'exit 1' INT TERM

if [[ ! -e /dev/nvidia0 ]] || ! nvidia-smi -L >"$work/nvidia-smi.txt" 2>&1; then
  echo "gpu-check: no GPU here (no /dev/nvidia0, or nvidia-smi -L failed): nothing checked"
  exit 2
fi
sed 's/^/gpu-check: device: /' "$work/nvidia-smi.txt"
nvidia-smi --query-gpu=driver_version,memory.used,utilization.gpu --format=csv,noheader 2>/dev/null |
  sed 's/^/gpu-check: driver, memory used, utilization: /' || true
if [[ $EUID -ne 0 ]]; then
  echo "gpu-check: hangtrace loads BPF programs: run this as root" >&2
  exit 1
fi

# Prints a log's tail and fails: for setup steps whose output is only interesting when they break.
run_logged() {
  local log=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "gpu-check: failed: $* (log: $log)" >&2
    return 1
  fi
}

if [[ -n ${HANGTRACE_BIN:-} ]]; then
  hangtrace=$HANGTRACE_BIN
  build=$(dirname "$hangtrace")
else
  build=${BUILD_DIR:-$repo/build}
  echo "gpu-check: building hangtrace and its CUPTI library in $build"
  run_logged "$work/cmake.log" cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
  run_logged "$work/ninja.log" ninja -C "$build" -j"$(nproc)" hangtrace hangtrace_cupti
  hangtrace=$build/hangtrace
fi
cupti_lib=${HANGTRACE_CUPTI_LIB:-$build/lib/libhangtrace_cupti.so}
for file in "$hangtrace" "$cupti_lib"; do
  [[ -f $file ]] || { echo "gpu-check: missing $file" >&2; exit 1; }
done
echo "gpu-check: hangtrace $hangtrace, CUPTI injection $cupti_lib"

program=$work/gpu_check
run_logged "$work/nvcc.log" "$nvcc" -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 \
  -gencode arch=compute_90,code=compute_90 -o "$program" "$repo/scripts/gpu_check/gpu_check.cu" -lpthread

"$hangtrace" --list-hooks >"$work/hooks.txt" 2>&1 || echo "gpu-check: hangtrace --list-hooks failed"
grep -Ei 'gpu|cupti|cuda|nccl|nvml' "$work/hooks.txt" | sed 's/^/gpu-check: hook: /' ||
  echo "gpu-check: no gpu/cupti hooks listed (see $work/hooks.txt)"

# Waits until the program prints MARKER (or dies, or the timeout passes); prints the marker line.
wait_for_marker() {
  local out=$1 marker=$2 pid=$3 deadline=$((SECONDS + marker_timeout_s))
  until grep -m1 "^$marker" "$out"; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS > deadline)); then return 1; fi
    sleep 0.1
  done
}

# Kills the program and reaps it; tearing down a GPU context (with a kernel still spinning) takes a moment.
stop_program() {
  local pid=$1 deadline=$((SECONDS + 60))
  kill -KILL "$pid" 2>/dev/null || true
  {  # bash reports the kill on stderr as soon as it reaps the child: expected, so not shown
    while [[ -e /proc/$pid && $(cut -d' ' -f3 "/proc/$pid/stat") != Z ]]; do
      ((SECONDS < deadline)) || { echo "  program $pid still exiting after 60s"; return; }
      sleep 0.1
    done
    wait "$pid" || true
  } 2>/dev/null
}

# run_case NAME MARKER TID_KEY MODE [PROGRAM ARGS...]: runs the program and hangtrace on it, then the check.
# MODE attach: the program reaches its state first, then `hangtrace --pid P --duration 5` (waits that began
# before hangtrace, as when a hung job is found in the morning). MODE launch: `hangtrace --hang-after 10 --
# PROGRAM` traces it from its first instruction and sets CUDA_INJECTION64_PATH itself.
run_case() {
  local name=$1 marker=$2 tid_key=$3 mode=$4
  shift 4
  local out=$work/$name.out json=$work/$name.json log=$work/$name.hangtrace.log
  echo "=== case $name ($mode): gpu_check $*"
  : >"$out"  # exists before the program writes it, for wait_for_marker
  local pid rc=0 marker_line tid
  if [[ $mode == launch ]]; then
    local -a env_args=()
    [[ -n ${HANGTRACE_CUPTI_LIB:-} ]] && env_args=(env "CUDA_INJECTION64_PATH=$cupti_lib")
    timeout 240 "${env_args[@]}" "$hangtrace" --hang-after 10 --json "$json" -- "$program" "$@" \
      >"$out" 2>"$log" || rc=$?
    marker_line=$(grep -m1 "^$marker" "$out" || true)
    pid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["target_pid"])' "$json" \
      2>/dev/null || true)
    [[ -n $pid ]] && stop_program "$pid"
    local seen=${marker_line:-"no $marker line"}
    echo "  job pid ${pid:-?}: $seen; hangtrace: $(grep -m1 'hangtrace:' "$log" || true)"
  else
    CUDA_INJECTION64_PATH=$cupti_lib "$program" "$@" >"$out" 2>"$work/$name.err" &
    pid=$!
    children+=("$pid")
    if ! marker_line=$(wait_for_marker "$out" "$marker" "$pid"); then
      if kill -0 "$pid" 2>/dev/null; then
        echo "  no '$marker' from the program within ${marker_timeout_s}s; its stderr:"
      else
        echo "  the program ended before printing '$marker'; its stderr:"
      fi
      sed 's/^/    /' "$work/$name.err"
      stop_program "$pid"
      echo "$name: FAIL"
      return 1
    fi
    echo "  program pid $pid: $marker_line"
    if [[ $name == spin* ]]; then sleep "$spin_age_s"; fi
    timeout 120 "$hangtrace" --pid "$pid" --duration 5 --json "$json" >"$log" 2>&1 || rc=$?
    stop_program "$pid"
  fi
  tid=$(sed -n "s/.*$tid_key=\([0-9]*\).*/\1/p" <<<"$marker_line")
  if [[ $rc -ne 0 && $rc -ne 2 ]] || [[ ! -s $json ]] || [[ -z $tid && $name != healthy ]]; then
    echo "  hangtrace exited $rc (marker: '${marker_line}'); its output:"  # 0 = nothing wrong, 2 = hang found
    tail -n 20 "$log" | sed 's/^/    /'
    echo "$name: FAIL"
    return 1
  fi
  /usr/bin/python3 - "$json" "$name" "$tid" <<'EOF'
import json
import sys

path, case, tid = sys.argv[1], sys.argv[2], int(sys.argv[3] or 0)
expected = {"healthy": None, "starved": "gpu-starved"}.get(case, "gpu-wait")
with open(path) as f:
    report = json.load(f)
verdict = report.get("verdict", {})
findings = report.get("findings", [])
print(f"  verdict: {verdict.get('status')}: {verdict.get('summary')}")
for finding in findings:
    print(f"  finding {finding.get('kind')}: {finding.get('summary')} (tids {finding.get('tids')})")
    if str(finding.get("kind", "")).startswith("gpu-"):
        print(f"    details: {json.dumps(finding.get('details'))[:600]}")
# What hangtrace saw of the thread that matters, and of the GPU: the first thing to read when a case fails.
for thread in (t for p in report.get("processes", []) for t in p.get("threads", []) if t.get("tid") == tid):
    wait = thread.get("wait") or {}
    frames = " < ".join(f.get("function") or "?" for f in thread.get("native_stack", [])[:8])
    print(f"  thread {tid} ({thread.get('comm')}): state {thread.get('state')}, {thread.get('activity')}, "
          f"syscall {thread.get('syscall')}, wait {wait.get('kind')}: {wait.get('summary')}")
    print(f"    native: {frames}")
for key in (k for k in report if "gpu" in k.lower()):
    print(f"  {key}: {json.dumps(report[key])[:800]}")
problems = []
if expected is None:
    problems += [f"unexpected {f['kind']}" for f in findings if str(f.get("kind", "")).startswith("gpu-")]
    if verdict.get("status") == "hang":
        problems.append("verdict 'hang' for a healthy job")
else:
    matching = [f for f in findings if f.get("kind") == expected]
    if not matching:
        problems.append(f"no {expected} finding")
    elif not any(tid in f.get("tids", []) for f in matching):
        problems.append(f"no {expected} finding names thread {tid}")
    if verdict.get("status") not in ("suspect", "hang"):
        problems.append(f"verdict '{verdict.get('status')}' for a stuck GPU job")
for problem in problems:
    print(f"  wrong: {problem}")
print(f"{case}: {'FAIL' if problems else 'PASS'}")
sys.exit(1 if problems else 0)
EOF
}

failed=()
run_case healthy HEALTHY tid launch healthy 20 || failed+=(healthy)
run_case starved STARVED feeder launch starved 2 || failed+=(starved)
# Spinning cases last: a kernel that outlived its killed process would only delay the end of the run.
# Launch mode sees the synchronize begin (the host spins in it by default: CPU busy, no progress);
# attached afterwards with blocking sync, only the thread's native stack shows it.
run_case spin SPINNING tid launch spin 120 auto || failed+=(spin)
run_case spin-blocking SPINNING tid attach spin 120 blocking || failed+=(spin-blocking)

if ((${#failed[@]})); then
  echo "gpu-check: FAILED: ${failed[*]} after ${SECONDS}s (files in $work)"
  exit 1
fi
echo "gpu-check: all cases passed in ${SECONDS}s (files in $work)"
