#!/usr/bin/env bash
# Installs what hangtrace needs from Debian's packages.
#
#   scripts/install-deps.sh          everything: build, run, test, benchmark, package
#   scripts/install-deps.sh demo     only what scripts/demo.sh needs: build the
#                                    hangtrace binary and run the bundled hung job
set -euo pipefail

set_wanted=${1:-all}
case $set_wanted in
  demo | all) ;;
  *) echo "usage: $0 [demo|all]" >&2; exit 2 ;;
esac

# One list; each package tagged with the set it belongs to. `demo` packages are
# in both sets, `all` packages only in the full one.
packages=(
  demo:cmake demo:ninja-build demo:g++ demo:clang demo:pkg-config
  demo:libbpf-dev demo:bpftool demo:libelf-dev demo:libdw-dev demo:zlib1g-dev
  demo:libfmt-dev demo:libcli11-dev demo:nlohmann-json3-dev
  demo:libre2-dev            # --match patterns: linear time, no recursion
  demo:prometheus-cpp-dev    # hangtrace daemon's /metrics (linked into the binary)
  demo:libcurl4-openssl-dev  # hangtrace merge fetches bundles from daemons and asks Prometheus
  demo:python3 demo:python3-torch   # the bundled hung job (and the PyTorch scenarios)
  all:llvm                   # llvm-objdump & co., for looking at the BPF objects
  all:libgtest-dev           # unit and integration tests
  all:prometheus             # the real server the daemon's metrics test scrapes with
  all:prometheus-alertmanager   # routes the shipped alert rules to the fleet test's webhook
  all:procps all:gdb all:strace   # peers in scripts/bench_snapshot.sh
  all:libbpf-tools all:bpftrace   # peers in scripts/bench_live.sh and scripts/bench_daemon.sh
  all:chromium               # renders the flame graph in tests (headless screenshot)
  all:systemtap-sdt-dev      # sys/sdt.h: the CUPTI injection library's USDT probe
  all:help2man               # the man page (hangtrace.1), from --help
  all:dpkg-dev               # dpkg-shlibdeps: the .deb's Depends (scripts/package.sh)
  all:time                   # /usr/bin/time: hangtrace's peak RSS in scenario.test_hostile_target
  all:clang-14 all:libclang-rt-14-dev   # the ASan+UBSan and libFuzzer tree (scripts/sanitize.sh)
)

missing=()
for entry in "${packages[@]}"; do
  tag=${entry%%:*}
  p=${entry#*:}
  [[ $set_wanted == all || $tag == "$set_wanted" ]] || continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
