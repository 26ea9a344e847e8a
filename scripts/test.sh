#!/usr/bin/env bash
# Set up everything (scripts/setup.sh --test), then run the static checks and the tests.
# Extra arguments go to pytest, e.g.  scripts/test.sh -k store -x   (-n 0: one at a time)
# Environment: FLEET_IDEM_TEST_WORKERS, parallel pytest workers (default: twice the cores;
# the tests mostly wait for processes and DDS, and each runs on its own DDS domain).
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
# DDS traffic of this run stays on this machine; each test leases its own domain id.
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
say "collection: the same tests with and without launch_testing's pytest plugin"
# That plugin imports every test module in its own collection hook: a module-level skip
# there once dropped the rest of a directory silently. The lists must be equal.
collected() { "$venv/bin/pytest" -q --collect-only -p no:cacheprovider "$@" 2>&1 | grep '::' | sort || true; }
with_plugin=$(collected)
without_plugin=$(collected -p no:launch_testing -p no:launch_ros)
if [ "$with_plugin" != "$without_plugin" ]; then
    diff <(printf '%s\n' "$with_plugin") <(printf '%s\n' "$without_plugin") | head -n 40 >&2
    echo "[test] collection differs with launch_testing's plugin (<) and without it (>)" >&2
    exit 1
fi
say "collected $(printf '%s\n' "$with_plugin" | grep -c .) tests either way"
workers=${FLEET_IDEM_TEST_WORKERS:-$(($(nproc) * 2))}
say "pytest on $workers workers"
status=0
# loadgroup: tests sharing a module fixture or a session build run on one worker (conftest).
"$venv/bin/pytest" -n "$workers" --dist loadgroup --durations=15 "$@" || status=$?
if [ "$status" = 5 ]; then
    say "pytest collected no tests (exit 5): nothing selected, nothing failed"
    status=0
fi
exit "$status"
