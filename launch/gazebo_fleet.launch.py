"""Bring up the simulated fleet in Gazebo (Harmonic, with ros_gz).

    ros2 launch fleet_idempotency gazebo_fleet.launch.py [fleet:=my_fleet.yaml]
        [world:=my_world.sdf] [headless:=true] [store_dir:=~/.ros/fleet_idempotency]
        [keyring_dir:=~/.ros/fleet_keys]

The world (slots, stations, docks, items) and the robot models are generated from the
fleet file, the same description ``fleet.launch.py`` uses; ``world`` replaces the
generated world. Robots are spawned with ``ros_gz_sim create``, their topics bridged by
``ros_gz_bridge``, and the world simulator, orchestrator and agents start as in
``fleet.launch.py``, the agents with ``backend:=gazebo``. The plan comes from
``fleet_idempotency.bringup.gazebo_plan.gazebo_plan``.
"""

from pathlib import Path

from launch import Action, LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from fleet_idempotency.bringup.gazebo_launch import gazebo_actions
from fleet_idempotency.bringup.gazebo_plan import gazebo_plan, write_files
from fleet_idempotency.bringup.plan import optional_path
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.description.resources import default_fleet_file


def _fleet_in_gazebo(context: LaunchContext) -> list[Action]:
    fleet_file = Path(LaunchConfiguration("fleet").perform(context)).expanduser()
    store_dir = Path(LaunchConfiguration("store_dir").perform(context)).expanduser()
    world = LaunchConfiguration("world").perform(context).strip()
    plan = gazebo_plan(
        load_fleet(fleet_file),
        fleet_file=fleet_file,
        store_dir=store_dir,
        output_dir=store_dir / "gazebo",
        headless=LaunchConfiguration("headless").perform(context).lower() in ("true", "1"),
        world_file=Path(world).expanduser() if world else None,
        keyring_dir=optional_path(LaunchConfiguration("keyring_dir").perform(context)),
    )
    write_files(plan)
    return gazebo_actions(plan)


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "fleet",
                default_value=str(default_fleet_file()),
                description="fleet description (YAML)",
            ),
            DeclareLaunchArgument(
                "world",
                default_value="",
                description="SDF world to use instead of the one generated from the fleet",
            ),
            DeclareLaunchArgument(
                "headless", default_value="false", description="true: no Gazebo GUI"
            ),
            DeclareLaunchArgument(
                "store_dir",
                default_value="~/.ros/fleet_idempotency",
                description="key stores, and the generated world, models and bridge file",
            ),
            DeclareLaunchArgument(
                "keyring_dir",
                default_value="",
                description="keyrings from `fleet-idem keys init`; empty: commands unsigned",
            ),
            OpaqueFunction(function=_fleet_in_gazebo),
        ]
    )
