"""The simulated warehouse: the world, its side-effect oracle, and how robots reach it.

- ``world``: waypoints, docks, pallet slots, arm stations; counts side effects per key.
- ``world_link``: the ``WorldLink`` interface and its in-process implementation.
- ``world_link_ros`` / ``world_node``: the same world over ROS services (``world_simulator``
  executable).
- ``mission``: a realistic mix of warehouse commands, planned robot by robot.
- ``gazebo_world`` / ``gazebo_names`` / ``gazebo_oracle``: the fleet as a Gazebo world,
  the names its models and topics share, and slot contents read from Gazebo's poses.

Only the ROS-free pieces are re-exported here.
"""

from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.geometry import Pose

from .world import World, WorldActionFailed
from .world_link import LocalWorldLink, WorldLink

__all__ = ["LocalWorldLink", "Pose", "World", "WorldActionFailed", "WorldConfig", "WorldLink"]
