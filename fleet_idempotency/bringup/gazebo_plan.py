"""One fleet description -> everything ``gazebo_fleet.launch.py`` starts. No ROS imports.

- files: the generated world, one model per robot, the ros_gz_bridge configuration;
- ``gz sim`` arguments: the world, started paused, ``-s`` (no GUI) when headless;
- start-up steps, run one after the other: spawn each robot at its start pose
  (``ros_gz_sim create``), release every DetachableJoint (Gazebo's DetachableJoint
  attaches its child as soon as both models exist, so without this every robot would
  hold every item it may carry), then unpause the world;
- nodes: the bridge, then exactly what ``launch_plan`` gives ``fleet.launch.py`` (world
  simulator, orchestrator, agents), with the agents on the Gazebo backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal
from xml.etree import ElementTree as ET

import yaml

from fleet_idempotency.bringup.plan import NodeSpec, launch_plan
from fleet_idempotency.description.fleet import FleetConfig
from fleet_idempotency.sim.gazebo_names import (
    ARM_JOINTS,
    CMD_VEL,
    GAZEBO_POSES_ROS_TOPIC,
    JOINT_STATES,
    ODOMETRY,
    WORLD_NAME,
    carry_topic,
    carryable_items,
    gz_topic,
    joint_command,
    pose_topic,
    ros_topic,
)
from fleet_idempotency.sim.gazebo_world import robot_sdf, world_sdf
from fleet_idempotency.sim.profiles import PROFILES

BRIDGE_PACKAGE: Final = "ros_gz_bridge"
SPAWN_HEIGHT_M: Final = 0.02
Direction = Literal["ROS_TO_GZ", "GZ_TO_ROS"]


@dataclass(frozen=True)
class Step:
    """One start-up command: a ROS executable (``package`` set) or a plain program."""

    command: list[str]
    package: str | None = None


@dataclass(frozen=True)
class GazeboPlan:
    world_name: str
    world_file: Path
    files: dict[Path, str]  # to write before anything starts
    gz_args: str
    steps: list[Step]
    nodes: list[NodeSpec] = field(default_factory=list)


def bridge_entry(
    ros: str, gz: str, ros_type: str, gz_type: str, direction: Direction
) -> dict[str, str]:
    """One entry of a ros_gz_bridge ``config_file``."""
    return {
        "ros_topic_name": ros,
        "gz_topic_name": gz,
        "ros_type_name": ros_type,
        "gz_type_name": gz_type,
        "direction": direction,
    }


def bridge_entries(fleet: FleetConfig, world_name: str = WORLD_NAME) -> list[dict[str, str]]:
    """Every topic the Gazebo backend uses, for every robot, plus the clock and item poses."""
    entries = [
        bridge_entry("/clock", "/clock", "rosgraph_msgs/msg/Clock", "gz.msgs.Clock", "GZ_TO_ROS"),
        # The side-effect oracle of Gazebo runs: where every item really is.
        bridge_entry(
            GAZEBO_POSES_ROS_TOPIC,
            pose_topic(world_name),
            "tf2_msgs/msg/TFMessage",
            "gz.msgs.Pose_V",
            "GZ_TO_ROS",
        ),
    ]
    for robot in fleet.robots:
        entries += _robot_entries(fleet, robot.id, robot.type)
    return entries


def _robot_entries(fleet: FleetConfig, robot_id: str, robot_type: str) -> list[dict[str, str]]:
    def entry(relative: str, ros_type: str, gz_type: str, direction: Direction) -> dict[str, str]:
        return bridge_entry(
            ros_topic(robot_id, relative),
            gz_topic(robot_id, relative),
            ros_type,
            gz_type,
            direction,
        )

    if robot_type == "arm":
        entries = [entry(JOINT_STATES, "sensor_msgs/msg/JointState", "gz.msgs.Model", "GZ_TO_ROS")]
        entries += [
            entry(joint_command(joint), "std_msgs/msg/Float64", "gz.msgs.Double", "ROS_TO_GZ")
            for joint in ARM_JOINTS
        ]
    else:
        entries = [
            entry(CMD_VEL, "geometry_msgs/msg/Twist", "gz.msgs.Twist", "ROS_TO_GZ"),
            entry(ODOMETRY, "nav_msgs/msg/Odometry", "gz.msgs.Odometry", "GZ_TO_ROS"),
        ]
    for item in carryable_items(fleet.world, robot_type):
        entries += [
            entry(carry_topic(item, "attach"), "std_msgs/msg/Empty", "gz.msgs.Empty", "ROS_TO_GZ"),
            entry(carry_topic(item, "detach"), "std_msgs/msg/Empty", "gz.msgs.Empty", "ROS_TO_GZ"),
        ]
    return entries


def world_name_of(sdf_text: str) -> str:
    """The name of the (first) world in an SDF file, for a user-supplied world."""
    try:
        world = ET.fromstring(sdf_text).find("world")
    except ET.ParseError as error:
        raise ValueError(f"the world file is not valid SDF/XML ({error})") from None
    if world is None or not world.get("name"):
        raise ValueError("the world file has no <world name=...>")
    return str(world.get("name"))


def _startup_steps(fleet: FleetConfig, world_name: str, model_files: dict[str, Path]) -> list[Step]:
    steps = [
        Step(
            [
                "create",
                "-world",
                world_name,
                "-name",
                robot.id,
                "-file",
                str(model_files[robot.id]),
                "-x",
                f"{robot.start.x:g}",
                "-y",
                f"{robot.start.y:g}",
                "-z",
                f"{SPAWN_HEIGHT_M:g}",
                "-Y",
                f"{robot.start.theta:g}",
            ],
            package="ros_gz_sim",
        )
        for robot in fleet.robots
    ]
    for robot in fleet.robots:
        for item in carryable_items(fleet.world, robot.type):
            topic = gz_topic(robot.id, carry_topic(item, "detach"))
            steps.append(
                Step(["gz", "topic", "-t", topic, "-m", "gz.msgs.Empty", "-p", "unused: true"])
            )
    steps.append(
        Step(
            [
                "gz",
                "service",
                "-s",
                f"/world/{world_name}/control",
                "--reqtype",
                "gz.msgs.WorldControl",
                "--reptype",
                "gz.msgs.Boolean",
                "--timeout",
                "5000",
                "--req",
                "pause: false",
            ]
        )
    )
    return steps


def gazebo_plan(
    fleet: FleetConfig,
    *,
    fleet_file: Path,
    store_dir: Path,
    output_dir: Path,
    headless: bool = False,
    world_file: Path | None = None,
    time_scale: float | None = None,
    keyring_dir: Path | None = None,
) -> GazeboPlan:
    """The Gazebo fleet for this description; ``world_file`` replaces the generated world
    (it must hold the fleet's items as ``item_<name>`` models for the grips to work)."""
    others = [
        f"{robot.id} ({robot.type}, backend {robot.backend!r})"
        for robot in fleet.robots
        if robot.backend != "simulated" or robot.type not in PROFILES
    ]
    if others:
        # Gazebo gives bodies to the simulated kinds only; a robot of another backend has
        # its own body, and a plan that swapped its backend for 'gazebo' would be wrong.
        raise ValueError(
            "a Gazebo fleet gives bodies to simulated amr, forklift and arm robots only; "
            f"not to {', '.join(others)}"
        )
    files: dict[Path, str] = {}
    if world_file is None:
        world_file = output_dir / "world.sdf"
        files[world_file] = world_sdf(fleet)
        world_name = WORLD_NAME
    else:
        world_name = world_name_of(world_file.read_text())
    model_files = {robot.id: output_dir / "models" / f"{robot.id}.sdf" for robot in fleet.robots}
    for robot in fleet.robots:
        files[model_files[robot.id]] = robot_sdf(fleet, robot)
    bridge_file = output_dir / "bridge.yaml"
    files[bridge_file] = yaml.safe_dump(bridge_entries(fleet, world_name), sort_keys=False)
    bridge = NodeSpec(
        "parameter_bridge",
        "ros_gz_bridge",
        "",
        {"config_file": str(bridge_file)},
        package=BRIDGE_PACKAGE,
    )
    fleet_nodes = [
        _on_gazebo(spec) if spec.executable == "agent_driver" else spec
        for spec in launch_plan(
            fleet,
            fleet_file=fleet_file,
            store_dir=store_dir,
            time_scale=time_scale,
            keyring_dir=keyring_dir,
        )
    ]
    return GazeboPlan(
        world_name=world_name,
        world_file=world_file,
        files=files,
        gz_args=f"{'-s ' if headless else ''}-v 3 {world_file}",  # no -r: starts paused
        steps=_startup_steps(fleet, world_name, model_files),
        nodes=[bridge, *fleet_nodes],
    )


def _on_gazebo(agent: NodeSpec) -> NodeSpec:
    parameters: dict[str, Any] = {**agent.parameters, "backend": "gazebo"}
    return replace(agent, parameters=parameters)


def write_files(plan: GazeboPlan) -> None:
    for path, text in plan.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
