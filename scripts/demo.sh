#!/usr/bin/env bash
# Fresh machine -> hangtrace diagnosing the bundled hung training job. Installs
# and builds only what the demo needs (scripts/test.sh: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/install-deps.sh demo
scripts/build.sh demo
echo "demo.sh: installed and built in $((SECONDS - start)) s" >&2
exec "${BUILD_DIR:-build}/hangtrace" demo "$@"
