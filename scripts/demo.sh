#!/usr/bin/env bash
# Set up everything (scripts/setup.sh), then run the simulated fleet demo:
# a warehouse mission through the orchestrator with faults injected, and a report.
# Extra arguments go to `fleet-idem demo` (see --help), e.g.  scripts/demo.sh --commands 1000
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FLEET_IDEM_VENV:-$repo/.venv}
bash "$repo/scripts/setup.sh"
cd /tmp  # never import the source tree instead of the built package
exec "$venv/bin/fleet-idem" demo "$@"
