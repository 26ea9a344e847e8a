"""Bring up a simulated fleet: world simulator, orchestrator and one agent per robot.

    ros2 launch fleet_idempotency fleet.launch.py [fleet:=my_fleet.yaml]
        [store_dir:=~/.ros/fleet_idempotency] [speed:=20] [keyring_dir:=~/.ros/fleet_keys]
        [http:=false] [http_port:=8081] [mqtt_broker:=host:port]

``speed`` is a speed-up of simulated time (20: twenty times faster than real time);
empty keeps the fleet file's ``simulation.time_scale``. ``http:=false`` leaves out the
HTTP API and fleet page (on by default, at the fleet file's ``http`` host and port;
``http_port`` overrides the port).
Robots with ``backend: vda5050`` are VDA 5050 vehicles: each also gets a simulated vehicle
process acting in the world simulator, and agent and vehicle meet on an MQTT broker that
is yours to run (unlike ``fleet-idem up``/``demo``, which start one): the robots'
``backend_params`` name it (``broker_host``, ``broker_port``, ``username``, and
``password_env``, the environment variable holding the password, set it before
``ros2 launch``), or ``mqtt_broker:=host:port`` sets the address for all of them.
The node list comes from ``fleet_idempotency.bringup.plan.launch_plan``, the same
function ``fleet-idem up`` uses.
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


def _nodes(context: LaunchContext) -> list[Action]:
    fleet_file = Path(LaunchConfiguration("fleet").perform(context)).expanduser()
    store_dir = Path(LaunchConfiguration("store_dir").perform(context)).expanduser()
    speed = LaunchConfiguration("speed").perform(context)
    with_http = LaunchConfiguration("http").perform(context).strip().lower() in ("true", "1")
    http_port = LaunchConfiguration("http_port").perform(context).strip()
    plan = launch_plan(
        load_fleet(fleet_file),
        fleet_file=fleet_file,
        store_dir=store_dir,
        time_scale=time_scale_for_speed(speed),
        keyring_dir=optional_path(LaunchConfiguration("keyring_dir").perform(context)),
        with_http=with_http,
        broker=parse_broker(LaunchConfiguration("mqtt_broker").perform(context)),
        http_port=int(http_port) if http_port else None,
    )
    return launch_nodes(plan)


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "fleet",
                default_value=str(default_fleet_file()),
                description="fleet description (YAML)",
            ),
            DeclareLaunchArgument(
                "store_dir",
                default_value="~/.ros/fleet_idempotency",
                description="where the LMDB key stores live",
            ),
            DeclareLaunchArgument(
                "speed",
                default_value="",
                description="simulated-time speed-up; empty: the fleet file's",
            ),
            DeclareLaunchArgument(
                "keyring_dir",
                default_value="",
                description="keyrings from `fleet-idem keys init`; empty: commands unsigned",
            ),
            DeclareLaunchArgument(
                "http",
                default_value="true",
                description="start the HTTP API and fleet page (false: leave them out)",
            ),
            DeclareLaunchArgument(
                "mqtt_broker",
                default_value="",
                description="host:port of the MQTT broker of the VDA 5050 robots; empty: the "
                "fleet file's backend_params",
            ),
            DeclareLaunchArgument(
                "http_port",
                default_value="",
                description="the HTTP API's port; empty: the fleet file's http.port",
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
