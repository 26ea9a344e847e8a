"""How soon an agent started beside a running VDA 5050 vehicle can take commands.

A password-protected Mosquitto, the world simulator and the package's simulated vehicle,
which publishes no factsheet unasked; its own state comes every ``--state-period`` s (one
run with a quiet vehicle, 60 s, one with a chatty one, 0.5 s, side by side). The agent is
started ``--starts`` times, each a new process stopped cleanly after; measured: from the
process's start to its first status (Python, rclpy, the store), and from there to its
status saying ready (the backend: MQTT connect, ``stateRequest``/``factsheetRequest``,
their answers). Before round 4 the backend waited for the vehicle's periodic state and
factsheet: with a quiet vehicle, up to the state period, and for ever without a factsheet.

    .venv/bin/python bench/bench_vda5050_ready.py [--starts 10]
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import rclpy

from fleet_idempotency.bringup.mosquitto import LocalMosquitto
from fleet_idempotency.bringup.processes import executable
from fleet_idempotency.bringup.report import percentile
from fleet_idempotency.description.resources import default_fleet_file
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id
from fleet_idempotency.testing import AgentUnderTest, BackendUnderTest, CommandSpec

MOVE = CommandSpec("move_to_waypoint", {"x": 3.0, "y": 0.5})
PASSWORD_ENV = "FLEET_IDEM_MQTT_PASSWORD"


def one_setting(state_period_s: float, starts: int, work: Path) -> tuple[list[float], list[float]]:
    """(process start -> first status, first status -> ready) of each start, in s."""
    with (
        LocalMosquitto(username="bench", password=secrets.token_hex(16)) as broker,
        lease_domain_id() as domain_id,
    ):
        env = {**isolated_environment(domain_id), PASSWORD_ENV: broker.password}
        logs = work / f"period-{state_period_s:g}"
        logs.mkdir()
        world = subprocess.Popen(
            [executable("world_simulator"), "--ros-args",
             "-p", f"fleet_file:={default_fleet_file()}"],
            env=env, stdout=(logs / "world.log").open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        vehicle = subprocess.Popen(
            [executable("vda5050_vehicle"), "--robot-id", "vda_1", "--robot-type", "amr",
             "--serial-number", "B1", "--broker-port", str(broker.port), "--username", "bench",
             "--state-period", str(state_period_s), "--start-y", "0.5"],
            env=env, stdout=(logs / "vehicle.log").open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=domain_id)
        params: dict[str, Any] = {
            "broker_port": broker.port,
            "username": "bench",
            "password_env": PASSWORD_ENV,
            "manufacturer": "fleet-idem",
            "serial_number": "B1",
        }
        subject = BackendUnderTest(
            "vda5050", "amr", MOVE, MOVE, MOVE, lambda _key: 0, params, robot_id="vda_1"
        )
        agent = AgentUnderTest(subject, env=env, work_dir=logs, context=context)
        to_status: list[float] = []
        to_ready: list[float] = []
        try:
            for _ in range(starts):
                began = time.monotonic()
                agent.start(wait_ready=False)
                first = time.monotonic()
                agent.wait(lambda: agent.latest_status().ready, "ready", timeout_s=120.0)
                to_status.append(first - began)
                to_ready.append(time.monotonic() - first)
                agent.signal(signal.SIGTERM)
        finally:
            agent.close()
            context.try_shutdown()
            for process in (vehicle, world):
                process.terminate()
                process.wait(timeout=20)
    return to_status, to_ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=10)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-vda5050-ready-"))
    try:
        rows = {period: one_setting(period, options.starts, work) for period in (60.0, 0.5)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nagent started beside a running vehicle, {options.starts} starts each (p50 / max, s)")
    print(f"{'vehicle state period':<22} {'start->first status':>20} {'first status->ready':>20}")
    for period, (to_status, to_ready) in rows.items():
        print(
            f"{period:<22g} {percentile(to_status, 0.5):>9.2f} / {max(to_status):<8.2f}"
            f" {percentile(to_ready, 0.5):>9.2f} / {max(to_ready):<8.2f}"
        )
    for period, (to_status, to_ready) in rows.items():
        total = [a + b for a, b in zip(to_status, to_ready, strict=True)]
        print(f"start_to_ready_p50_s_period_{period:g}={percentile(total, 0.5):.3f}")
        print(f"start_to_ready_max_s_period_{period:g}={max(total):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
