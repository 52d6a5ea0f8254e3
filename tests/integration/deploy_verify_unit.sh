#!/bin/sh
# deploy_verify_unit.sh SYSTEMD_ANALYZE UNIT: `systemd-analyze verify` of the
# unit in a scratch root (no systemd as PID 1 needed, nothing installed):
# ExecStart's /usr/local/bin/hangtrace is a stand-in, the system's own units
# are copied for the dependencies. Any warning fails the test: verify exits 0
# on unknown keys and bad values.
set -eu
analyze=$1
unit=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system" "$root/usr/lib/systemd"
printf '#!/bin/sh\n' > "$root/usr/local/bin/hangtrace"
chmod 0755 "$root/usr/local/bin/hangtrace"
cp "$unit" "$root/etc/systemd/system/hangtrace.service"
for d in /usr/lib/systemd/system /lib/systemd/system; do
  if [ -d "$d" ]; then cp -r "$d" "$root/usr/lib/systemd/"; break; fi
done
out=$("$analyze" verify --root="$root" /etc/systemd/system/hangtrace.service 2>&1) || {
  echo "$out"; exit 1; }
if [ -n "$out" ]; then echo "$out"; exit 1; fi
echo "systemd-analyze verify: $(basename "$unit") OK"
