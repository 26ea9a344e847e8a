"""A WorldLink over the world simulator's ROS services.

It runs its own small node and executor thread, so that a simulated robot can call the
world synchronously from any thread (the agent's constructor, its executor thread)
without depending on how the agent node itself is spun.

One link serves every agent of a process (``agent_host``): requests name their robot.
Every client of a service receives every reply of the service and drops the ones that
are not its own, so one client per robot made each world reply cost O(fleet) in every
agent process; one per process keeps it O(processes).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rclpy.client import Client
from rclpy.context import Context

from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.geometry import Pose
from fleet_idempotency.ros.qos import SERVICE_QOS
from fleet_idempotency.ros.side_thread import EventsSpinner, side_node
from fleet_idempotency.sim.world import WorldActionFailed, WorldActionName
from fleet_idempotency.srv import GetWorldState, WorldAction


class WorldUnavailable(RuntimeError):
    """The world simulator did not answer in time."""


class RosWorldLink:
    def __init__(self, context: Context, name: str, timeout_s: float = 10.0) -> None:
        """``name``: of the link's node, ``world_link_<name>``."""
        self.timeout_s = timeout_s
        self._node = side_node(f"world_link_{name}", context)
        self._act = self._node.create_client(WorldAction, "/world/act", qos_profile=SERVICE_QOS)
        self._state = self._node.create_client(
            GetWorldState, "/world/state", qos_profile=SERVICE_QOS
        )
        self._executor = EventsSpinner(self._node, f"world-link-{name}")
        self._geometry: WorldConfig | None = None
        self._pose_updates: dict[str, Any] = {}  # robot id: its pose update on the way
        self._ready = False

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=1.0)
        self._node.destroy_node()

    def wait_until_ready(self, timeout_s: float) -> None:
        """Wait for a real round trip, not just a visible server: right after start-up a
        request can be lost while discovery completes, and a counted action must never be
        the one that gets lost (it could not be re-sent without risking a double count)."""
        if self._ready:
            return
        deadline = time.monotonic() + timeout_s
        probe = WorldAction.Request(robot_id="", action="locate")
        while time.monotonic() < deadline:
            if self._act.wait_for_service(timeout_sec=min(1.0, timeout_s)):
                try:
                    self._call(self._act, probe, timeout_s=1.0)
                    self._ready = True
                    return
                except WorldUnavailable:
                    continue
        raise WorldUnavailable(
            f"the world simulator did not answer within {timeout_s:.0f} s "
            "(is the world_simulator node running in this ROS domain?)"
        )

    def _call(self, client: Client, request: Any, timeout_s: float | None = None) -> Any:
        patience_s = self.timeout_s if timeout_s is None else timeout_s
        future = client.call_async(request)
        done = threading.Event()
        future.add_done_callback(lambda _future: done.set())
        if not done.wait(patience_s):
            client.remove_pending_request(future)
            raise WorldUnavailable(f"the world did not answer within {patience_s:.0f} s")
        return future.result()

    # --- WorldLink ------------------------------------------------------------------------
    def geometry(self) -> WorldConfig:
        if self._geometry is None:
            response = self._call(self._state, GetWorldState.Request())
            self._geometry = WorldConfig.model_validate_json(response.geometry_json)
        return self._geometry

    def locate(self, robot_id: str) -> Pose | None:
        response = self._call(self._act, WorldAction.Request(robot_id=robot_id, action="locate"))
        return Pose(x=response.x, y=response.y, theta=response.theta) if response.known else None

    def set_pose(self, robot_id: str, pose: Pose) -> None:
        # Not counted and superseded by the next update: no need to wait for the answer,
        # and while one update is still on its way the next can be skipped.
        pending = self._pose_updates.get(robot_id)
        if pending is not None and not pending.done():
            return
        self._pose_updates[robot_id] = self._act.call_async(
            WorldAction.Request(
                robot_id=robot_id, action="pose", x=pose.x, y=pose.y, theta=pose.theta
            )
        )

    def act(self, robot_id: str, key: str, action: WorldActionName, target: str, pose: Pose) -> str:
        request = WorldAction.Request(
            robot_id=robot_id,
            idempotency_key=key,
            action=action,
            target=target,
            x=pose.x,
            y=pose.y,
            theta=pose.theta,
        )
        try:
            response = self._call(self._act, request)
        except WorldUnavailable as error:
            raise WorldActionFailed(f"{error}; whether the {action} happened is unknown") from None
        if not response.success:
            raise WorldActionFailed(response.message)
        return str(response.item)
