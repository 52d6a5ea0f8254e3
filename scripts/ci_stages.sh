# Sourced by scripts/test.sh and scripts/sanitize.sh: how long each stage of a
# run took, and which tests were slowest.
#
#   stage NAME CMD...     runs CMD; records "SECONDS<TAB>NAME<TAB>EXIT" in
#                         $HANGTRACE_STAGE_LOG (one file for the whole run,
#                         shared with the scripts it starts)
#   run_ctest SUITE DIR ARGS...
#                         ctest ARGS in DIR, its output also kept for
#                         print_slowest_tests under SUITE's name
#   print_stages          the stages so far, and the ten slowest tests
if [[ -z ${HANGTRACE_STAGE_LOG:-} ]]; then
  HANGTRACE_STAGE_LOG=$(mktemp -d /tmp/hangtrace-ci-stages.XXXXXX)/stages
  : >"$HANGTRACE_STAGE_LOG"
fi
export HANGTRACE_STAGE_LOG

stage() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  printf '%s\t%s\t%s\n' $((SECONDS - t0)) "$name" "$rc" >>"$HANGTRACE_STAGE_LOG"
  return "$rc"
}

run_ctest() {
  local suite=$1 dir=$2
  shift 2
  (cd "$dir" && ctest "$@") | tee "$(dirname "$HANGTRACE_STAGE_LOG")/ctest-$suite.log"
}

print_stages() {
  local dir
  dir=$(dirname "$HANGTRACE_STAGE_LOG")
  echo
  echo "== stages (seconds, exit status)"
  awk -F'\t' '{printf "  %-34s %6d s  %s\n", $2, $1, ($3 == 0 ? "ok" : "exit " $3); total += $1}
              END {printf "  %-34s %6d s  (stages overlap: the wall time is below)\n", "sum", total}' \
    "$HANGTRACE_STAGE_LOG"
  echo "== ten slowest tests (seconds, suite)"
  for log in "$dir"/ctest-*.log; do
    [[ -f $log ]] || continue
    local suite=${log##*/ctest-}
    # "  5/688 Test  #5: NAME .......   Passed    0.01 sec"
    sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9]+\.[0-9]+) sec$/\2 \1/p' "$log" |
      awk -v suite="${suite%.log}" '{printf "%10.2f  %-10s %s\n", $1, suite, $2}'
  done | sort -rn | head -10 || true  # head closing the pipe early is no failure
}
