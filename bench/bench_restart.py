"""How long an agent host takes from its spawn to "ready", after a clean stop and after a
kill -9 of the one before it, with the killed one's UDP ports held by the supervisor (as
it does) and not held (as before), side by side in one run (prints name=value lines).

The world simulator stays up throughout, as it does when the supervisor restarts a
robot host; each agent host is started by ``FleetProcesses`` (no supervision, so the
restart is timed from this script's spawn), and "ready" is the agent's own log line.

    .venv/bin/python bench/bench_restart.py [--restarts 4]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fleet_idempotency.bringup.plan import launch_plan
from fleet_idempotency.bringup.processes import (
    FleetProcesses,
    clean_dds_shared_memory,
    executable,
)
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id

FLEET_FILE = Path(__file__).resolve().parents[1] / "config" / "fleet.yaml"
READY_LINE = re.compile(r"\[INFO\] \[(\d+\.\d+)\] \[[^]]*\]: \S+ \S+ ready:")
READY_TIMEOUT_S = 60.0


def ready_stamps(log: Path) -> list[float]:
    return [float(stamp) for stamp in READY_LINE.findall(log.read_text())] if log.exists() else []


def time_starts(
    processes: FleetProcesses, store_dir: Path, robots: int, starts: int, stop: Callable[[], None]
) -> list[float]:
    """Spawn the agent host ``starts`` times, ending each run with ``stop``: seconds from
    each spawn to its last agent's "ready" line."""
    log = processes.log_dir / "agents.log"
    argv = [executable("agent_host"), "--fleet", str(FLEET_FILE), "--store-dir", str(store_dir)]
    seconds = []
    for _ in range(starts):
        seen = len(ready_stamps(log))
        spawned = time.time()
        processes.start("agents", argv)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ready_stamps(log)) < seen + robots:
            if time.monotonic() > deadline:
                raise RuntimeError(f"agents not ready within {READY_TIMEOUT_S} s")
            time.sleep(0.01)
        seconds.append(max(ready_stamps(log)[seen:]) - spawned)
        stop()
        processes.children["agents"].process.wait()
        clean_dds_shared_memory()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=4, help="starts timed each way")
    options = parser.parse_args()
    fleet = load_fleet(FLEET_FILE)
    store_dir = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    with lease_domain_id() as domain_id:
        processes = FleetProcesses(
            store_dir / "logs", isolated_environment(domain_id), respawn=False
        )
        try:
            plan = launch_plan(
                fleet,
                fleet_file=FLEET_FILE,
                store_dir=store_dir,
                with_orchestrator=False,
                with_http=False,
            )
            for spec in plan:
                if spec.executable == "world_simulator":
                    processes.start_node(spec)
            robots = len(fleet.robots)

            def stop_cleanly() -> None:
                processes.children["agents"].process.terminate()

            def kill() -> None:
                processes.crash("agents")

            # Clean stops first: a start after a kill is slow while the world still holds
            # the killed participant, which would count against the clean ones.
            clean = time_starts(processes, store_dir, robots, options.restarts, stop_cleanly)
            killed = time_starts(processes, store_dir, robots, options.restarts, kill)
            # As before the supervisor held a killed child's ports (bringup/port_hold.py):
            # each start takes the participant id of the one just killed.
            processes.port_hold_s = 0.0
            unheld = time_starts(processes, store_dir, robots, options.restarts, kill)
        finally:
            processes.stop_all()
    print(f"restart_robots={robots}")
    print(f"restart_starts_each_way={options.restarts}")
    series = (
        ("after_clean_stop", clean),
        ("after_kill_9", killed),
        ("after_kill_9_ports_not_held", unheld),
    )
    for name, seconds in series:
        print(f"restart_{name}_median_s={statistics.median(seconds):.2f}")
        print(f"restart_{name}_max_s={max(seconds):.2f}")
        print(f"restart_{name}_all_s={','.join(f'{s:.2f}' for s in seconds)}")


if __name__ == "__main__":
    main()
