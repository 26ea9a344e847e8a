"""Bring-up: one fleet description drives ``ros2 launch`` and the plain ``fleet-idem`` command.

- ``fleet_config``: the fleet description (YAML, validated with pydantic).
- ``plan``: fleet description -> the nodes to start (used by the launch files and
  ``fleet-idem``); ``launch_nodes`` turns that plan into ``launch_ros`` actions.
- ``processes``: start, crash, restart and stop a fleet's processes without ``ros2 launch``.
- ``cli``: the ``fleet-idem`` command (demo, up, submit, check).
- ``demo`` and ``report``: the simulated warehouse run with faults, and its invariants.
- ``resources``: where the installed config/ and launch/ files live.

Only the ROS-free description and plan are re-exported here.
"""

from .fleet_config import FleetConfig, FleetConfigError, RobotSpec, load_fleet, parse_fleet
from .plan import NodeSpec, agent_node, launch_plan

__all__ = [
    "FleetConfig",
    "FleetConfigError",
    "NodeSpec",
    "RobotSpec",
    "agent_node",
    "launch_plan",
    "load_fleet",
    "parse_fleet",
]
