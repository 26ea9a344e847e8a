"""The package's own simulated backend passes the backend conformance kit, as any
third-party backend must (fleet_idempotency/testing/conformance.py): a real agent process,
a real world simulator counting every side effect, real signals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.geometry import Pose
from fleet_idempotency.testing import BackendUnderTest, CommandSpec
from fleet_idempotency.testing.agent_under_test import wait_until
from fleet_idempotency.testing.conformance import *  # noqa: F403 - the conformance checks

from support.fleet_harness import BIN, FLEET_FILE
from support.ros_support import ChildProcesses

# 40 m at an AMR's 1.5 m/s is ~27 simulated seconds: 2.7 s at this scale, long enough to
# catch the command running; short moves take a few ms.
TIME_SCALE = 0.1


class WorldOracle:
    """The world simulator's side-effect count, read over its GetWorldState service."""

    def __init__(self, context: Any) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from fleet_idempotency.ros.qos import SERVICE_QOS
        from fleet_idempotency.srv import GetWorldState

        self.node = rclpy.create_node("world_oracle", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.client = self.node.create_client(
            GetWorldState, "/world/state", qos_profile=SERVICE_QOS
        )
        self.request = GetWorldState.Request

    def _call(self) -> Any:
        future = self.client.call_async(self.request())
        return wait_until(
            lambda: future.done() and future.result(),
            "the world state",
            spin=lambda s: self.executor.spin_once(timeout_sec=s),
        )

    def wait_ready(self) -> None:
        wait_until(
            self.client.service_is_ready,
            "the world simulator",
            timeout_s=60,
            spin=lambda s: self.executor.spin_once(timeout_sec=s),
        )

    def side_effects(self, robot_id: str, key: str) -> int:
        state = json.loads(self._call().state_json)
        return len(state["side_effects"].get(robot_id, {}).get(key, []))

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()


@pytest.fixture
def backend_under_test(
    conformance_env: dict[str, str], conformance_context: Any, tmp_path: Path
) -> Iterator[BackendUnderTest]:
    world = ChildProcesses(tmp_path)
    world.spawn(
        "world",
        [str(BIN / "world_simulator"), "--ros-args", "-p", f"fleet_file:={FLEET_FILE}"],
        conformance_env,
    )
    oracle = WorldOracle(conformance_context)
    try:
        oracle.wait_ready()
        yield BackendUnderTest(
            backend="simulated",
            robot_type="amr",
            params={"time_scale": TIME_SCALE},
            completes=CommandSpec("move_to_waypoint", {"x": 1.0, "y": 0.5}),
            refused=CommandSpec("move_to_waypoint", {"waypoint": "NOWHERE"}),
            slow=CommandSpec("move_to_waypoint", {"x": 40.0, "y": 0.5}),
            side_effects=lambda key: oracle.side_effects("robot_under_test", key),
            start=Pose(x=0.0, y=0.5),
        )
    finally:
        oracle.close()
        world.stop_all()
