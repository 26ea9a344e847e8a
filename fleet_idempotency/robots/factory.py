"""The backend an agent drives, chosen by its ``backend`` parameter.

``simulated`` (the default): the kinematic robots of ``simulated.py``; ``gazebo``: the
same robots with their bodies in Gazebo (``gazebo_control.py``, wired by ``gazebo_ros.py``).
Both act on the world simulator, which keeps counting every side effect.
"""

from __future__ import annotations

from typing import Any, Final

from rclpy.node import Node

from fleet_idempotency.robots.backend import RobotBackend
from fleet_idempotency.robots.gazebo_ros import gazebo_backend
from fleet_idempotency.robots.simulated import SimulatedRobot
from fleet_idempotency.sim.world import Pose
from fleet_idempotency.sim.world_link import WorldLink

BACKENDS: Final = ("simulated", "gazebo")


def make_backend(node: Node, world: WorldLink, parameters: dict[str, Any]) -> RobotBackend:
    """The backend for the agent's parameters (robot_id, robot_type, start pose, ...)."""
    kind = parameters["backend"]
    robot_id, robot_type = parameters["robot_id"], parameters["robot_type"]
    start = Pose(x=parameters["start_x"], y=parameters["start_y"], theta=parameters["start_theta"])
    if kind == "simulated":
        return SimulatedRobot(
            robot_id, robot_type, world, start, time_scale=parameters["time_scale"]
        )
    if kind == "gazebo":
        return gazebo_backend(
            node,
            world,
            robot_id=robot_id,
            robot_type=robot_type,
            start=start,
            time_scale=parameters["time_scale"],
        )
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {kind!r}")
