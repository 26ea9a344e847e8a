"""One robot's agent driver, as the robot runs it onboard.

    ros2 launch fleet_idempotency robot.launch.py robot_id:=forklift_1 \\
        [fleet:=my_fleet.yaml] [store_dir:=/var/lib/fleet_idempotency] [speed:=1]

The robot's type, start pose, capacity and retention come from its entry in the fleet
file, through the same ``fleet_idempotency.bringup.plan`` function the fleet launch uses.
"""

from pathlib import Path

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from fleet_idempotency.bringup.launch_nodes import launch_nodes
from fleet_idempotency.bringup.plan import (
    launch_plan,
    optional_path,
    parse_broker,
    time_scale_for_speed,
)
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.description.resources import default_fleet_file


def _agent(context: LaunchContext) -> list[Action]:
    fleet_file = Path(LaunchConfiguration("fleet").perform(context)).expanduser()
    plan = launch_plan(
        load_fleet(fleet_file),
        fleet_file=fleet_file,
        store_dir=Path(LaunchConfiguration("store_dir").perform(context)).expanduser(),
        time_scale=time_scale_for_speed(LaunchConfiguration("speed").perform(context)),
        robots=[LaunchConfiguration("robot_id").perform(context)],
        with_orchestrator=False,
        with_world=False,
        keyring_dir=optional_path(LaunchConfiguration("keyring_dir").perform(context)),
        broker=parse_broker(LaunchConfiguration("mqtt_broker").perform(context)),
    )
    return launch_nodes(plan)


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("robot_id", description="this robot's id in the fleet file"),
            DeclareLaunchArgument("fleet", default_value=str(default_fleet_file())),
            DeclareLaunchArgument("store_dir", default_value="~/.ros/fleet_idempotency"),
            DeclareLaunchArgument("speed", default_value="1"),
            # The robot's own keyring <keyring_dir>/<robot_id>.json; empty: unsigned accepted.
            DeclareLaunchArgument("keyring_dir", default_value=""),
            # A VDA 5050 robot's MQTT broker, host:port; empty: its backend_params'.
            DeclareLaunchArgument("mqtt_broker", default_value=""),
            OpaqueFunction(function=_agent),
        ]
    )
