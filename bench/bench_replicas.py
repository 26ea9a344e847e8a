"""Submit->final and sustained commands/s: one orchestrator on LMDB, one on PostgreSQL, and
two replicas on PostgreSQL, side by side in one run.

Not a test: runs ``bench_orchestrator.py`` once per set-up on the same machine, one after
the other, and prints its figures in one table. Usage:
``.venv/bin/python bench/bench_replicas.py [--commands 500] [--latency-commands 50]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

SETUPS = {
    "lmdb_1": [],
    "postgres_1": ["--postgres"],
    "postgres_2_replicas": ["--postgres", "--replicas", "2"],
}
FIGURES = (
    "bare_service_round_trip_p50_ms",
    "submit_to_final_p50_ms",
    "submit_to_final_p99_ms",
    "throughput_commands_per_s",
    "throughput_zero_loss",
    "cpu_us_per_command_orchestrator",
    "idle_cpu_percent_orchestrator",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=500)
    parser.add_argument("--latency-commands", type=int, default=50)
    parser.add_argument("--robots", type=int, default=20)
    options = parser.parse_args()
    script = Path(__file__).with_name("bench_orchestrator.py")
    results: dict[str, dict[str, str]] = {}
    for name, extra in SETUPS.items():
        run = subprocess.run(
            [sys.executable, str(script), "--commands", str(options.commands),
             "--latency-commands", str(options.latency_commands),
             "--robots", str(options.robots), *extra],
            capture_output=True, text=True, check=False, timeout=1800,
        )  # fmt: skip
        lines = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
        results[name] = lines
        if run.returncode != 0:
            print(f"{name}: exit {run.returncode}: {run.stderr[-500:]}", flush=True)
    print(f"{'figure':36}" + "".join(f"{name:>22}" for name in SETUPS))
    for figure in FIGURES:
        cells = "".join(f"{results[name].get(figure, '-'):>22}" for name in SETUPS)
        print(f"{figure:36}{cells}")


if __name__ == "__main__":
    main()
