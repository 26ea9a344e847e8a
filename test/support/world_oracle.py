"""The world simulator's side-effect count, read over its GetWorldState service: the
oracle for "at most once" of the tests that drive the world through another process
(the conformance kit's subjects, the VDA 5050 stand)."""

from __future__ import annotations

import json
from typing import Any

from fleet_idempotency.testing.agent_under_test import ask, wait_until


class WorldOracle:
    """The world simulator's side-effect count, over its GetWorldState service."""

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

    def state(self) -> dict[str, Any]:
        response = ask(
            self.client,
            self.request(),
            "the world state",
            spin=lambda s: self.executor.spin_once(timeout_sec=s),
        )
        return dict(json.loads(response.state_json))

    def wait_ready(self) -> None:
        wait_until(
            self.client.service_is_ready,
            "the world simulator",
            timeout_s=60,
            spin=lambda s: self.executor.spin_once(timeout_sec=s),
        )

    def side_effects(self, robot_id: str, key: str) -> int:
        return len(self.state()["side_effects"].get(robot_id, {}).get(key, []))

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
