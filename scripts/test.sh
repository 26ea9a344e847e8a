#!/usr/bin/env bash
# Set up everything (scripts/setup.sh --test), then run the static checks and the tests.
# Extra arguments go to pytest, e.g.  scripts/test.sh -k store -x
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FLEET_IDEM_VENV:-$repo/.venv}
bash "$repo/scripts/setup.sh" --test
cd "$repo"

say() { printf '\033[1m[test]\033[0m %s\n' "$*"; }
say "ruff (lint + format)"
"$venv/bin/ruff" check --quiet .
"$venv/bin/ruff" format --check --quiet .
say "mypy (strict; the ROS shells may call untyped rclpy)"
"$venv/bin/mypy" --no-error-summary
say "import-linter (the layers run one way; the agent never imports the simulator)"
"$venv/bin/lint-imports" --no-cache >/dev/null || "$venv/bin/lint-imports" --no-cache
say "pytest"
# DDS traffic of this run stays on this machine; each test leases its own domain id.
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
status=0
"$venv/bin/pytest" "$@" || status=$?
if [ "$status" = 5 ]; then
    say "pytest collected no tests (exit 5): nothing selected, nothing failed"
    status=0
fi
exit "$status"
