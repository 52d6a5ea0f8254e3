# shellcheck shell=bash
# Sourced by the benchmarks that run against the bundled hung job
# (scripts/demo_hung_job.py). Needs $tmp (a scratch dir) and die().
# shellcheck disable=SC2154  # tmp is the caller's
#
# start_demo_job CMD...: starts CMD (the job) in its own session, stdout and
# stderr in $tmp/job.out and $tmp/job.err, waits for its READY line (the job
# prints it once its workers are stuck), and sets job_pid (the session
# leader, for `kill -- -$job_pid`), main, workers (space-separated) and
# threads (of main and workers).
start_demo_job() {
  setsid "$@" >"$tmp/job.out" 2>"$tmp/job.err" </dev/null &
  job_pid=$!
  for _ in $(seq 1 1200); do
    grep -q '^hangtrace-demo: READY' "$tmp/job.out" 2>/dev/null && break
    kill -0 "$job_pid" 2>/dev/null || { cat "$tmp/job.err" >&2; die "the demo job exited"; }
    sleep 0.1
  done
  local ready
  ready=$(grep '^hangtrace-demo: READY' "$tmp/job.out") || die "no READY line from the demo job"
  main=$(sed -n 's/.*main=\([0-9]*\).*/\1/p' <<<"$ready")
  workers=$(sed -n 's/.*workers=\([0-9,]*\).*/\1/p' <<<"$ready" | tr ',' ' ')
  threads=0
  local p
  # shellcheck disable=SC2086  # a list of pids
  for p in $main $workers; do threads=$((threads + $(find "/proc/$p/task" -mindepth 1 -maxdepth 1 | wc -l))); done
}
