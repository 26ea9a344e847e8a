"""``launch`` actions for a Gazebo plan; used by ``gazebo_fleet.launch.py`` only.

Needs a full ROS 2 install with ros_gz (launch, launch_ros and ros_gz_sim are not on
PyPI); what it starts comes from ``bringup.gazebo_plan``, tested without them.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch.action import Action
from launch.actions import ExecuteProcess, IncludeLaunchDescription, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch_ros.actions import Node

from fleet_idempotency.bringup.gazebo_plan import GazeboPlan, Step
from fleet_idempotency.bringup.launch_nodes import launch_nodes


def _process(step: Step) -> ExecuteProcess:
    if step.package is not None:
        return Node(
            package=step.package,
            executable=step.command[0],
            arguments=step.command[1:],
            output="screen",
        )
    return ExecuteProcess(cmd=step.command, output="screen")


def gazebo_actions(plan: GazeboPlan) -> list[Action]:
    """gz sim, the start-up steps one after the other, then the bridge and the fleet."""
    gz_sim = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(
            str(Path(get_package_share_directory("ros_gz_sim")) / "launch" / "gz_sim.launch.py")
        ),
        launch_arguments={"gz_args": plan.gz_args, "on_exit_shutdown": "true"}.items(),
    )
    processes = [_process(step) for step in plan.steps]
    # Each step starts when the one before it has exited: a robot must exist before its
    # joints are released, and the world must not run before they are.
    chain: list[Action] = [
        RegisterEventHandler(OnProcessExit(target_action=before, on_exit=[after]))
        for before, after in pairwise(processes)
    ]
    first = processes[:1]
    return [gz_sim, *first, *chain, *launch_nodes(plan.nodes)]
