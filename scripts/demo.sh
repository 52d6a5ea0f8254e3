#!/usr/bin/env bash
# Fresh machine -> hangtrace diagnosing the bundled hung training job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec ./build/hangtrace demo "$@"
