"""Agent-driver figures, measured side by side in one run (prints name=value lines).

- command -> result latency through a real agent (durable claim + execute + durable
  finish + publish) for a zero-duration command, against a bare rclpy publish/subscribe
  round trip through an echo process using the same message types;
- the latency of a duplicate (answered from the store);
- the agent's idle CPU (% of one core) and RSS.

    .venv/bin/python bench/bench_agent.py [--commands 300] [--idle-seconds 10]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor

from fleet_idempotency.bringup.report import percentile
from fleet_idempotency.msg import CommandResult, FleetCommand
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id

BIN = Path(sys.prefix) / "bin"
FLEET_FILE = Path(__file__).resolve().parents[1] / "config" / "fleet.yaml"
ECHO = """
import rclpy
from rclpy.executors import ExternalShutdownException
from fleet_idempotency.msg import CommandResult, FleetCommand
from fleet_idempotency.bringup.report import percentile
rclpy.init()
node = rclpy.create_node("echo")
results = node.create_publisher(CommandResult, "/fleet/results", 256)
def echo(command):
    results.publish(CommandResult(idempotency_key=command.idempotency_key, state=3,
                                  status_code=200, attempt=command.attempt))
node.create_subscription(FleetCommand, "/fleet/echo/commands", echo, 256)
try:
    rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
"""


class Client:
    def __init__(self, context: Any) -> None:
        self.node = rclpy.create_node("bench_client", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.arrived: dict[tuple[str, int], float] = {}
        self.node.create_subscription(CommandResult, "/fleet/results", self._on_result, 1024)
        self.publishers: dict[str, Any] = {}

    def _on_result(self, result: CommandResult) -> None:
        if result.state in (3, 4) or result.replayed:
            self.arrived.setdefault((result.idempotency_key, result.attempt), time.perf_counter())

    def publisher(self, robot_id: str) -> Any:
        if robot_id not in self.publishers:
            self.publishers[robot_id] = self.node.create_publisher(
                FleetCommand, f"/fleet/{robot_id}/commands", 256
            )
        return self.publishers[robot_id]

    def wait(self, condition: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            self.executor.spin_once(timeout_sec=0.01)

    def round_trip(
        self, robot_id: str, key: str, command_type: str, payload: str, attempt: int = 1
    ) -> float:
        started = time.perf_counter()
        self.publisher(robot_id).publish(
            FleetCommand(
                idempotency_key=key,
                robot_id=robot_id,
                command_type=command_type,
                payload_json=payload,
                attempt=attempt,
            )
        )
        self.wait(lambda: (key, attempt) in self.arrived, 10.0, f"the answer to {key}")
        return self.arrived[(key, attempt)] - started


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=300)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    options = parser.parse_args()

    with lease_domain_id() as domain_id, tempfile.TemporaryDirectory() as scratch:
        env = isolated_environment(domain_id)
        logs = open(Path(scratch) / "children.log", "wb")  # noqa: SIM115
        children = [
            subprocess.Popen(
                [str(BIN / "world_simulator"), "--ros-args", "-p", f"fleet_file:={FLEET_FILE}"],
                env=env,
                stdout=logs,
                stderr=logs,
            ),
            subprocess.Popen(
                [
                    str(BIN / "agent_driver"),
                    "--ros-args",
                    "-r",
                    "__ns:=/fleet/amr_1",
                    "-p",
                    "robot_id:=amr_1",
                    "-p",
                    "robot_type:=amr",
                    "-p",
                    "backend_params.time_scale:=0.0",
                    "-p",
                    f"store_dir:={scratch}/stores",
                    "-p",
                    "capacity:=1000",
                ],
                env=env,
                stdout=logs,
                stderr=logs,
            ),
            subprocess.Popen([sys.executable, "-c", ECHO], env=env, stdout=logs, stderr=logs),
        ]
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=domain_id)
        try:
            client = Client(context)
            for robot_id in ("amr_1", "echo"):
                client.wait(
                    lambda r=robot_id: client.publisher(r).get_subscription_count() > 0,
                    60.0,
                    f"{robot_id} to subscribe",
                )
            # Warm up both paths (first messages pay for discovery and allocation).
            for index in range(20):
                client.round_trip("echo", f"warm-echo-{index}", "dock", "{}")
                client.round_trip("amr_1", f"warm-{index}", "dock", '{"dock": "D1"}')

            bare, agent, duplicate = [], [], []
            for index in range(options.commands):
                bare.append(client.round_trip("echo", f"echo-{index}", "dock", "{}"))
                # Docking where it already is: the robot does no travel, only the world
                # records the dock (one service call), so this is the zero-duration command.
                agent.append(client.round_trip("amr_1", f"cmd-{index}", "dock", '{"dock": "D1"}'))
                duplicate.append(
                    client.round_trip("amr_1", f"cmd-{index}", "dock", '{"dock": "D1"}', attempt=2)
                )
            for name, samples in (
                ("bare_pubsub_round_trip", bare),
                ("agent_new_command", agent),
                ("agent_duplicate_replay", duplicate),
            ):
                print(f"{name}_p50_ms={statistics.median(samples) * 1e3:.3f}")
                print(f"{name}_p99_ms={percentile(samples, 0.99) * 1e3:.3f}")
            print(
                f"agent_vs_bare_p50_ratio={statistics.median(agent) / statistics.median(bare):.2f}"
            )

            agent_pid = children[1].pid
            before, started = cpu_seconds(agent_pid), time.monotonic()
            time.sleep(options.idle_seconds)  # a measurement window, not a wait for a condition
            used = cpu_seconds(agent_pid) - before
            print(f"agent_idle_cpu_percent={100 * used / (time.monotonic() - started):.2f}")
            print(f"agent_rss_mb={rss_mb(agent_pid):.1f}")
            print(f"commands={options.commands}")
        finally:
            for child in children:
                child.send_signal(signal.SIGTERM)
            for child in children:
                child.wait(timeout=15)
            context.try_shutdown()
            logs.close()


if __name__ == "__main__":
    main()
