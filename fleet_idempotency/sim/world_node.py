"""World simulator node: owns the simulated warehouse and its side-effect oracle.

Services: ``/world/act`` (WorldAction: robots' physical actions), ``/world/state``
(GetWorldState: geometry, state and side-effect counts). Topic: ``/world/markers``
(visualization_msgs/MarkerArray of slots, items and robots, for RViz).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from rclpy.node import Node
from visualization_msgs.msg import Marker, MarkerArray

from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.description.resources import default_fleet_file
from fleet_idempotency.geometry import Pose
from fleet_idempotency.ros.guard import CallbackGuard
from fleet_idempotency.ros.node_main import run_nodes
from fleet_idempotency.ros.qos import SERVICE_QOS, drop_default_event_handlers
from fleet_idempotency.sim.world import COUNTED_ACTIONS, World, WorldActionFailed
from fleet_idempotency.srv import GetWorldState, WorldAction


class WorldSimulator(Node):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("world_simulator", **kwargs)  # type: ignore[arg-type]
        fleet_file = self.declare_parameter("fleet_file", "").value or str(default_fleet_file())
        marker_period_s = float(self.declare_parameter("marker_period_s", 1.0).value)
        fleet = load_fleet(Path(str(fleet_file)))
        self.world = World(fleet.world)
        for robot in fleet.robots:
            self.world.register_robot(robot.id, robot.start)
        self.counters: Counter[str] = Counter()
        guard = CallbackGuard(
            self.get_logger(), self.counters, shutting_down=lambda: not self.context.ok()
        )
        self.create_service(
            WorldAction,
            "/world/act",
            guard.service("world_act", self._on_act, _act_failed),
            qos_profile=SERVICE_QOS,
        )
        self.create_service(
            GetWorldState,
            "/world/state",
            guard.service("world_state", self._on_state, _state_failed),
            qos_profile=SERVICE_QOS,
        )
        self._markers = self.create_publisher(MarkerArray, "/world/markers", 1)
        self.create_timer(marker_period_s, guard.timer("markers", self._publish_markers))
        drop_default_event_handlers(self)  # they only log; the executor walks them per call
        self.get_logger().info(
            f"world from {fleet_file}: {len(fleet.world.slots)} slots, "
            f"{len(fleet.world.waypoints)} waypoints, {len(fleet.world.docks)} docks"
        )

    def _on_act(
        self, request: WorldAction.Request, response: WorldAction.Response
    ) -> WorldAction.Response:
        pose = Pose(x=request.x, y=request.y, theta=request.theta)
        if request.action == "locate":
            known = self.world.locate(request.robot_id)
            response.success = True
            response.known = known is not None
            if known is not None:
                response.x, response.y, response.theta = known.x, known.y, known.theta
            return response
        if request.action == "pose":
            self.world.set_pose(request.robot_id, pose)
            response.success = True
            return response
        if request.action not in COUNTED_ACTIONS:
            response.message = f"unknown world action {request.action!r}"
            return response
        try:
            response.item = self.world.act(
                request.robot_id, request.idempotency_key, request.action, request.target, pose
            )
            response.success = True
        except WorldActionFailed as failure:
            response.message = str(failure)
        return response

    def _on_state(
        self, _request: GetWorldState.Request, response: GetWorldState.Response
    ) -> GetWorldState.Response:
        response.geometry_json = self.world.config.model_dump_json()
        response.state_json = json.dumps(self.world.snapshot(), sort_keys=True)
        return response

    def _publish_markers(self) -> None:
        if self._markers.get_subscription_count() == 0:
            return
        snapshot = self.world.snapshot()
        markers = MarkerArray()
        stamp = self.get_clock().now().to_msg()
        for index, (name, slot) in enumerate(sorted(self.world.config.slots.items())):
            occupied = snapshot["slots"].get(name) is not None
            markers.markers.append(
                _marker(
                    index,
                    "slots",
                    shape=Marker.CUBE,
                    pose=Pose(x=slot.x, y=slot.y),
                    stamp=stamp,
                    rgb=(0.9, 0.6, 0.1) if occupied else (0.5, 0.5, 0.5),
                )
            )
        for index, (robot_id, pose) in enumerate(sorted(snapshot["poses"].items())):
            marker = _marker(
                index,
                "robots",
                shape=Marker.ARROW,
                pose=Pose(**pose),
                stamp=stamp,
                rgb=(0.1, 0.4, 0.9),
            )
            marker.text = robot_id
            markers.markers.append(marker)
        self._markers.publish(markers)


def _act_failed(response: WorldAction.Response, message: str) -> WorldAction.Response:
    response.success = False
    response.message = message
    return response


def _state_failed(response: GetWorldState.Response, message: str) -> GetWorldState.Response:
    response.geometry_json = response.state_json = ""
    return response


def _marker(
    marker_id: int,
    namespace: str,
    *,
    shape: int,
    pose: Pose,
    stamp: object,
    rgb: tuple[float, float, float],
) -> Marker:
    marker = Marker()
    marker.header.frame_id = "map"
    marker.header.stamp = stamp
    marker.ns = namespace
    marker.id = marker_id
    marker.type = shape
    marker.pose.position.x, marker.pose.position.y = pose.x, pose.y
    marker.pose.orientation.z = math.sin(pose.theta / 2)
    marker.pose.orientation.w = math.cos(pose.theta / 2)
    marker.scale.x = marker.scale.y = marker.scale.z = 0.8
    marker.color.r, marker.color.g, marker.color.b = rgb
    marker.color.a = 1.0
    return marker


def main(args: list[str] | None = None) -> None:
    # One thread: every callback is short and the World is one lock's worth of state, so
    # a second thread only added the multi-threaded executor's hand-off to each /world/act
    # (measured: docs/design.md). Not the EventsExecutor: the markers need a timer.
    run_nodes("world_simulator", lambda: [WorldSimulator()], executor="single", args=args)


if __name__ == "__main__":
    main()
