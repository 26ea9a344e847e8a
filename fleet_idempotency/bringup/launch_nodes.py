"""``launch_ros`` Node actions for a launch plan; used by the launch files only.

Needs a full ROS 2 install (launch_ros is not on PyPI); the plan itself comes from
``bringup.launch_plan`` and is tested without it.
"""

from __future__ import annotations

from launch_ros.actions import Node

from fleet_idempotency.bringup.plan import NodeSpec, parameters_as_launch


def launch_nodes(plan: list[NodeSpec]) -> list[Node]:
    # No ``name=``: launch_ros turns it into a process-wide ``__node`` remap that would
    # give the helper nodes of an agent or the orchestrator the same name; each node
    # class already carries its conventional name.
    return [
        Node(
            package=spec.package,
            executable=spec.executable,
            namespace=spec.namespace,
            parameters=parameters_as_launch(spec),
            output="screen",
        )
        for spec in plan
    ]
