"""``launch_ros`` Node actions for a launch plan; used by the launch files only.

Needs a full ROS 2 install (launch_ros is not on PyPI); the plan itself comes from
``bringup.launch_plan`` and is tested without it.
"""

from __future__ import annotations

from launch_ros.actions import Node

from fleet_idempotency.bringup.plan import NodeSpec, launch_node_arguments


def launch_nodes(plan: list[NodeSpec]) -> list[Node]:
    return [Node(**launch_node_arguments(spec)) for spec in plan]
