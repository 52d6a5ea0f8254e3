# shellcheck shell=bash
# Sourced by the benchmarks with a Python driver (scripts/bench_live.sh,
# scripts/bench_daemon.sh, scripts/bench_fleet.sh). Needs die().
# shellcheck disable=SC2034  # BENCH_LIB_DIR is for the Python driver

# Their Python drivers import scripts/bench_lib.py from here.
BENCH_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# compile_bench_workloads DIR NAME...: bench/NAME.cpp -> DIR/NAME, the way every
# workload is built (g++ -O2, no CMake target: benchmark inputs, not product).
compile_bench_workloads() {
  local dir=$1 w
  shift
  command -v g++ >/dev/null || die "needs g++"
  for w in "$@"; do
    g++ -std=c++20 -O2 -Wall -Wextra -pthread -o "$dir/$w" "$BENCH_LIB_DIR/../bench/$w.cpp" -lrt ||
      die "failed to compile $w"
  done
}

# bpf_stats_on: with BPF_STATS=1, turns kernel.bpf_stats_enabled on (machine-wide:
# run_cnt and run_time_ns of every BPF program) for the run; bpf_stats_restore,
# from the caller's EXIT trap, puts the previous value back.
bench_stats_was=
bpf_stats_on() {
  if [[ ${BPF_STATS:-0} == 1 ]]; then
    bench_stats_was=$(cat /proc/sys/kernel/bpf_stats_enabled)
    echo 1 >/proc/sys/kernel/bpf_stats_enabled
  fi
}
bpf_stats_restore() {
  if [[ -n $bench_stats_was ]]; then
    echo "$bench_stats_was" >/proc/sys/kernel/bpf_stats_enabled
    bench_stats_was=
  fi
}
