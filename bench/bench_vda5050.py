"""Submit -> final over VDA 5050 against the DDS path, in one run, through one orchestrator.

Two AMRs in one fleet, each parked on its own dock, time scale 0: ``amr_dds`` is a ROS
robot (the ``simulated`` backend, its agent over DDS), ``amr_vda`` a VDA 5050 vehicle (the
``vda5050`` backend: its agent publishes an order over MQTT to a simulated vehicle
process, through a real password-protected Mosquitto, and reads the vehicle's ``state``).
The command is the zero-duration ``dock`` at the dock the robot sits at, so what is
measured is the pipeline: orchestrator claim + dispatch, agent claim, then either the
simulated world action or order -> vehicle -> world action -> state, agent finish,
orchestrator finish.

- latency: ``--latency-commands`` sequential submits per path (``SubmitCommand`` with
  ``wait_timeout_sec``), interleaved DDS/VDA so that the machine's drift hits both alike;
  p50/p90/p99 of the client's submit -> final;
- throughput: ``--throughput-commands`` per path, ``--window`` client threads submitting
  at once, one path after the other; commands/s from first submit to last final;
- zero loss: every key COMPLETED, the world saw exactly one side effect per key.

    .venv/bin/python bench/bench_vda5050.py [--latency-commands 100]
        [--throughput-commands 200] [--window 8]
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import rclpy
import yaml

from fleet_idempotency.bringup.mosquitto import LocalMosquitto
from fleet_idempotency.bringup.plan import PASSWORD_VARIABLE, launch_plan, with_broker
from fleet_idempotency.bringup.processes import FleetProcesses
from fleet_idempotency.bringup.report import percentile
from fleet_idempotency.description.fleet import FleetConfig, parse_fleet
from fleet_idempotency.orchestrator.core import robot_key
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id
from fleet_idempotency.ros.fleet_client import FleetClient

CLIENT = "bench"
PATHS = {"DDS (simulated backend)": "amr_dds", "VDA 5050 (MQTT, vehicle)": "amr_vda"}
DOCKS = {"amr_dds": "D1", "amr_vda": "D2"}
COMPLETED = 3


def bench_fleet() -> FleetConfig:
    return parse_fleet(
        {
            "world": {
                "waypoints": {"W1": {"x": 5.0, "y": 5.0}},
                "docks": {"D1": {"x": 0.0, "y": 0.0}, "D2": {"x": 0.0, "y": 4.0}},
                "slots": {},
            },
            "robots": [
                {"id": "amr_dds", "type": "amr", "start": {"x": 0.0, "y": 0.0}, "capacity": 64},
                {
                    "id": "amr_vda",
                    "type": "amr",
                    "start": {"x": 0.0, "y": 4.0},
                    "capacity": 64,
                    "backend": "vda5050",
                    "backend_params": {"manufacturer": "bench", "serial_number": "VDA-1"},
                },
            ],
            "simulation": {"time_scale": 0.0},
        }
    )


class Run:
    def __init__(self, client: FleetClient) -> None:
        self.client = client
        self.keys: dict[str, list[str]] = {robot: [] for robot in DOCKS}
        self.failed: list[str] = []
        self._lock = threading.Lock()

    def command(self, robot: str, key: str) -> float:
        """Submit until final (a 503 while a robot is not ready is asked again)."""
        with self._lock:
            self.keys[robot].append(key)
        started = time.perf_counter()
        while True:
            response = self.client.submit(
                CLIENT, key, robot, "dock", {"dock": DOCKS[robot]}, wait_timeout_s=10.0
            ).response
            if response.status_code in (202, 409, 429, 503):
                time.sleep(0.05)  # not final yet or not ready: the same key again
                continue
            elapsed = time.perf_counter() - started
            if response.state != COMPLETED:
                with self._lock:
                    self.failed.append(f"{key}: {response.status_code} {response.message}")
            return elapsed

    def throughput(self, robot: str, count: int, window: int) -> float:
        numbers = iter(range(count))
        numbers_lock = threading.Lock()

        def worker() -> None:
            while True:
                with numbers_lock:
                    number = next(numbers, None)
                if number is None:
                    return
                self.command(robot, f"tput-{robot}-{number}")

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(window)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return count / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-commands", type=int, default=100)
    parser.add_argument("--throughput-commands", type=int, default=200)
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--warm-up", type=int, default=10)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-vda5050-"))
    with (
        LocalMosquitto(username="bench", password=secrets.token_hex(16)) as broker,
        lease_domain_id() as domain_id,
    ):
        fleet = with_broker(
            bench_fleet(),
            broker.host,
            broker.port,
            username=broker.username,
            password_env=PASSWORD_VARIABLE,
        )
        fleet_file = work / "fleet.yaml"
        fleet_file.write_text(yaml.safe_dump(fleet.model_dump(mode="json"), sort_keys=False))
        env = {**isolated_environment(domain_id), PASSWORD_VARIABLE: broker.password}
        processes = FleetProcesses(work / "logs", env)
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=domain_id)
        client: FleetClient | None = None
        try:
            plan = launch_plan(fleet, fleet_file=fleet_file, store_dir=work, with_http=False)
            processes.start_plan(plan, fleet_file=fleet_file, store_dir=work)
            client = FleetClient(context, "bench_vda5050_client")
            client.wait_for_services(timeout_s=90.0)
            run = Run(client)
            for number in range(options.warm_up):
                for robot in DOCKS:
                    run.command(robot, f"warm-{robot}-{number}")
            latencies: dict[str, list[float]] = {robot: [] for robot in DOCKS}
            for number in range(options.latency_commands):
                for robot in DOCKS:
                    latencies[robot].append(run.command(robot, f"lat-{robot}-{number}"))
            rates = {
                robot: run.throughput(robot, options.throughput_commands, options.window)
                for robot in DOCKS
            }
            world = client.world_state()
        finally:
            if client is not None:
                client.close()
            context.try_shutdown()
            processes.stop_all()
    effects = world.get("side_effects", {})
    lost_or_repeated = [
        f"{robot}/{key}"
        for robot, keys in run.keys.items()
        for key in keys
        if len(effects.get(robot, {}).get(robot_key(CLIENT, key), [])) != 1
    ]
    print(
        f"\nsubmit -> final, zero-duration dock, one orchestrator, {options.latency_commands} "
        f"sequential commands per path (interleaved); throughput: "
        f"{options.throughput_commands} commands per path, {options.window} at once"
    )
    print(f"{'path':<26} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'commands/s':>11}")
    for name, robot in PATHS.items():
        samples = latencies[robot]
        print(
            f"{name:<26} {percentile(samples, 0.5) * 1e3:8.1f} "
            f"{percentile(samples, 0.9) * 1e3:8.1f} {percentile(samples, 0.99) * 1e3:8.1f} "
            f"{rates[robot]:11.1f}"
        )
    for robot in PATHS.values():
        tag = "vda" if robot == "amr_vda" else "dds"
        samples = latencies[robot]
        print(f"{tag}_latency_p50_ms={percentile(samples, 0.5) * 1e3:.1f}")
        print(f"{tag}_latency_p90_ms={percentile(samples, 0.9) * 1e3:.1f}")
        print(f"{tag}_latency_p99_ms={percentile(samples, 0.99) * 1e3:.1f}")
        print(f"{tag}_commands_per_s={rates[robot]:.1f}")
    total = sum(len(keys) for keys in run.keys.values())
    ok = not run.failed and not lost_or_repeated
    print(
        f"zero_loss={'yes' if ok else 'NO'} ({total} keys; not COMPLETED: {run.failed[:3]}; "
        f"not exactly one side effect: {lost_or_repeated[:3]})"
    )
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"logs: {work / 'logs'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
