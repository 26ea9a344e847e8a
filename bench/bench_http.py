"""HTTP submit -> final against the ROS SubmitCommand path, side by side in one run.

Both paths drive the same orchestrator, agent and world (real processes, time scale 0, a
zero-duration ``dock`` at the dock the robot sits on, so the figures are the pipeline's
own cost): the ROS path is ``FleetClient.submit`` (SubmitCommand with a wait), the HTTP
path is ``POST /v1/robots/{robot}/commands`` with ``wait_timeout_sec`` through the
``http_api`` node, which makes the same SubmitCommand call. Latency phases interleave the
two paths so they see the same machine load; the throughput phase runs each path with
``--window`` submits outstanding. Every command is checked COMPLETED, and the world's
oracle must count exactly one side effect per key at the end.

    .venv/bin/python bench/bench_http.py [--latency-commands 200] [--commands 400]
        [--window 16]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import rclpy
from bench_orchestrator import dock_of, write_fleet

from fleet_idempotency.bringup.report import percentile
from fleet_idempotency.http.ports import available_port
from fleet_idempotency.orchestrator.core import robot_key
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id
from fleet_idempotency.ros.fleet_client import FleetClient

BIN = Path(sys.prefix) / "bin"
ROS_CLIENT = "bench_ros"
HTTP_CLIENT = "local"  # the HTTP API's caller without API keys
WAIT_S = 10.0


class Paths:
    def __init__(self, ros: FleetClient, http: httpx.Client, robot: str) -> None:
        self.ros = ros
        self.http = http
        self.robot = robot
        self.dock = {"dock": dock_of(robot)}
        self.fleet_s: list[float] = []  # the SubmitCommand call's share (Server-Timing)

    def via_ros(self, key: str) -> float:
        started = time.perf_counter()
        answer = self.ros.submit(
            ROS_CLIENT, key, self.robot, "dock", self.dock, wait_timeout_s=WAIT_S
        ).response
        elapsed = time.perf_counter() - started
        if answer.status_code != 200 or answer.state != 3:
            raise SystemExit(f"ROS {key}: {answer.status_code} {answer.message}")
        return elapsed

    def via_http(self, key: str) -> float:
        started = time.perf_counter()
        answer = self.http.post(
            f"/v1/robots/{self.robot}/commands",
            json={"command_type": "dock", "payload": self.dock, "wait_timeout_sec": WAIT_S},
            headers={"Idempotency-Key": key},
        )
        elapsed = time.perf_counter() - started
        if answer.status_code != 200 or answer.json()["state"] != "completed":
            raise SystemExit(f"HTTP {key}: {answer.status_code} {answer.text}")
        self.fleet_s.append(float(answer.headers["server-timing"].split("dur=")[1]) / 1e3)
        return elapsed


async def http_window(base_url: str, robot: str, keys: list[str], window: int) -> None:
    limit = asyncio.Semaphore(window)
    body = {"command_type": "dock", "payload": {"dock": dock_of(robot)}, "wait_timeout_sec": 30}
    async with httpx.AsyncClient(
        base_url=base_url,
        timeout=60,
        limits=httpx.Limits(max_connections=window),
    ) as client:

        async def one(key: str) -> None:
            async with limit:
                answer = await client.post(
                    f"/v1/robots/{robot}/commands", json=body, headers={"Idempotency-Key": key}
                )
                if answer.status_code != 200:
                    raise SystemExit(f"HTTP {key}: {answer.status_code} {answer.text}")

        await asyncio.gather(*(one(key) for key in keys))


def report(name: str, samples: list[float]) -> None:
    print(f"{name}_p50_ms={statistics.median(samples) * 1e3:.3f}")
    print(f"{name}_p90_ms={percentile(samples, 0.90) * 1e3:.3f}")
    print(f"{name}_p99_ms={percentile(samples, 0.99) * 1e3:.3f}")
    print(f"{name}_mean_ms={statistics.fmean(samples) * 1e3:.3f}")


def run(paths: Paths, base_url: str, options: argparse.Namespace) -> list[tuple[str, float, float]]:
    for index in range(20):  # warm-up: discovery, connection, JIT-free but cache-warm
        paths.via_ros(f"warm-ros-{index}")
        paths.via_http(f"warm-http-{index}")
    ros, http = [], []
    paths.fleet_s.clear()
    for index in range(options.latency_commands):
        ros.append(paths.via_ros(f"lat-ros-{index}"))
        http.append(paths.via_http(f"lat-http-{index}"))
    report("ros_submit_to_final", ros)
    report("http_submit_to_final", http)
    report("http_node_submitcommand_call", paths.fleet_s)
    overhead = statistics.median(http) - statistics.median(ros)
    print(f"http_overhead_p50_ms={overhead * 1e3:.3f}")

    keys = [f"tp-ros-{index}" for index in range(options.commands)]
    started = time.perf_counter()
    with ThreadPoolExecutor(options.window) as pool:
        list(pool.map(paths.via_ros, keys))
    ros_rate = options.commands / (time.perf_counter() - started)
    keys = [f"tp-http-{index}" for index in range(options.commands)]
    started = time.perf_counter()
    asyncio.run(http_window(base_url, paths.robot, keys, options.window))
    http_rate = options.commands / (time.perf_counter() - started)
    print(f"ros_commands_per_s={ros_rate:.1f}")
    print(f"http_commands_per_s={http_rate:.1f}")

    world = paths.ros.world_state()
    effects = world["side_effects"].get(paths.robot, {})
    sample = [robot_key(ROS_CLIENT, "lat-ros-0"), robot_key(HTTP_CLIENT, "lat-http-0")]
    total_keys = 40 + 2 * options.latency_commands + 2 * options.commands
    print(f"keys_with_side_effects={len(effects)} (expected {total_keys})")
    print(f"max_side_effects_per_key={world['max_side_effects_per_key']}")
    if (
        len(effects) != total_keys
        or world["max_side_effects_per_key"] != 1
        or not all(len(effects.get(key, [])) == 1 for key in sample)
    ):
        raise SystemExit("at-most-once violated or a command lost")
    return [
        ("submit -> final p50 (ms)", statistics.median(ros) * 1e3, statistics.median(http) * 1e3),
        ("submit -> final p99 (ms)", percentile(ros, 0.99) * 1e3, percentile(http, 0.99) * 1e3),
        (f"commands/s, {options.window} outstanding", ros_rate, http_rate),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-commands", type=int, default=200)
    parser.add_argument("--commands", type=int, default=400, help="throughput phase, per path")
    parser.add_argument("--window", type=int, default=16, help="outstanding submits")
    options = parser.parse_args()

    with lease_domain_id() as domain_id, tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        env = isolated_environment(domain_id)
        (robot,) = write_fleet(scratch / "fleet.yaml", 1, 32)
        fleet_file = f"fleet_file:={scratch}/fleet.yaml"
        port = available_port("127.0.0.1", 0)
        logs = open(scratch / "children.log", "wb")  # noqa: SIM115
        children: list[subprocess.Popen[bytes]] = []
        for argv in (
            [str(BIN / "world_simulator"), "--ros-args", "-p", fleet_file],
            [
                str(BIN / "orchestrator"),
                "--ros-args",
                "-p",
                fleet_file,
                "-p",
                f"store_dir:={scratch}/orchestrator",
            ],
            [
                str(BIN / "agent_driver"),
                "--ros-args",
                "-r",
                f"__ns:=/fleet/{robot}",
                "-p",
                f"robot_id:={robot}",
                "-p",
                "robot_type:=amr",
                "-p",
                "backend_params.time_scale:=0.0",
                "-p",
                f"store_dir:={scratch}/agents",
                "-p",
                "capacity:=32",
                "-p",
                "start_x:=0.0",
                "-p",
                "start_y:=0.0",
            ],
            [str(BIN / "http_api"), "--ros-args", "-p", fleet_file, "-p", f"port:={port}"],
        ):
            children.append(subprocess.Popen(argv, env=env, stdout=logs, stderr=logs, cwd=scratch))
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=domain_id)
        ros = FleetClient(context, "bench_http_client")
        base_url = f"http://127.0.0.1:{port}"
        try:
            started = time.perf_counter()
            ros.wait_for_services(timeout_s=90)
            with httpx.Client(base_url=base_url, timeout=60) as http:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        if http.get("/readyz").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise SystemExit("http_api did not start")
                    time.sleep(0.1)
                print(f"startup_s={time.perf_counter() - started:.1f}")
                rows = run(Paths(ros, http, robot), base_url, options)
            print(f"\n{'':36} {'ROS':>8} {'HTTP':>8}")
            for name, ros_value, http_value in rows:
                print(f"{name:36} {ros_value:8.2f} {http_value:8.2f}")
        finally:
            ros.close()
            for child in children:
                child.send_signal(signal.SIGTERM)
            for child in children:
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    child.kill()
            context.try_shutdown()
            logs.close()


if __name__ == "__main__":
    main()
