#!/usr/bin/env bash
# Installs what hangtrace needs to build, run and test, from Debian's packages.
set -euo pipefail

packages=(
  cmake ninja-build g++ clang llvm pkg-config
  libbpf-dev bpftool libelf-dev libdw-dev zlib1g-dev
  libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev
  prometheus-cpp-dev      # hangtrace daemon's /metrics
  prometheus              # the real server the daemon's metrics test scrapes with
  python3 python3-torch   # the bundled hung job and the PyTorch scenarios
  procps gdb strace       # peers in scripts/bench_snapshot.sh
  libbpf-tools bpftrace   # peers in scripts/bench_live.sh and scripts/bench_daemon.sh
  chromium                # renders the flame graph in tests (headless screenshot)
  systemtap-sdt-dev       # sys/sdt.h: the CUPTI injection library's USDT probe
)

missing=()
for p in "${packages[@]}"; do
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
