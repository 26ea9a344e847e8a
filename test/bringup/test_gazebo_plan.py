"""What gazebo_fleet.launch.py starts, checked without launch, Gazebo or ros_gz.

The plan is plain data: the files it writes, the ``gz sim`` arguments, the start-up
steps in order, and the nodes. The bridge entries are cross-checked against the
topics the generated models' Gazebo systems use, so a renamed topic on either side
fails here rather than as a silent robot in Gazebo.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from fleet_idempotency.bringup.gazebo_plan import (
    GazeboPlan,
    bridge_entries,
    gazebo_plan,
    world_name_of,
    write_files,
)
from fleet_idempotency.bringup.plan import launch_plan
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.sim.gazebo_names import WORLD_NAME, carryable_items
from fleet_idempotency.sim.gazebo_world import robot_sdf

from support.paths import FLEET_FILE, REPO

FLEET = load_fleet(FLEET_FILE)
ROS_NAME = re.compile(r"^(/[A-Za-z][A-Za-z0-9_]*)+$")
# Which way each Gazebo system's topic flows, seen from ROS.
SYSTEM_TOPICS = {
    "VelocityControl": (("topic",), "ROS_TO_GZ"),
    "OdometryPublisher": (("odom_topic",), "GZ_TO_ROS"),
    "JointPositionController": (("topic",), "ROS_TO_GZ"),
    "JointStatePublisher": (("topic",), "GZ_TO_ROS"),
    "DetachableJoint": (("attach_topic", "detach_topic"), "ROS_TO_GZ"),
}


def plan_in(
    tmp_path: Path, *, headless: bool = False, world_file: Path | None = None
) -> GazeboPlan:
    return gazebo_plan(
        FLEET,
        fleet_file=FLEET_FILE,
        store_dir=tmp_path / "stores",
        output_dir=tmp_path / "gazebo",
        headless=headless,
        world_file=world_file,
    )


def test_every_gazebo_topic_of_every_model_is_bridged_in_its_direction() -> None:
    bridged = {entry["gz_topic_name"]: entry for entry in bridge_entries(FLEET)}
    used = 0
    for robot in FLEET.robots:
        model = ET.fromstring(robot_sdf(FLEET, robot)).find("model")
        assert model is not None
        for plugin in model.findall("plugin"):
            system = str(plugin.get("name")).rsplit("::", 1)[-1]
            tags, direction = SYSTEM_TOPICS[system]
            for tag in tags:
                topic = plugin.findtext(tag)
                assert topic in bridged, f"{robot.id}: {system} {tag} {topic} is not bridged"
                assert bridged[topic]["direction"] == direction
                used += 1
    # Nothing bridged that no model uses, besides the clock and the item poses.
    assert used == len(bridged) - 2


def test_bridge_entries_are_valid_unique_ros_topics_in_the_robots_namespaces() -> None:
    entries = bridge_entries(FLEET)
    ros_topics = [entry["ros_topic_name"] for entry in entries]
    assert len(ros_topics) == len(set(ros_topics))
    for topic in ros_topics:
        assert ROS_NAME.match(topic), topic
    forklift = {t for t in ros_topics if t.startswith("/fleet/forklift_1/")}
    assert "/fleet/forklift_1/cmd_vel" in forklift
    assert "/fleet/forklift_1/odom" in forklift
    assert "/fleet/forklift_1/carry/item_P_d1/attach" in forklift
    assert len(forklift) == 2 + 2 * len(carryable_items(FLEET.world, "forklift"))
    arm = {t for t in ros_topics if t.startswith("/fleet/arm_1/")}
    assert {"/fleet/arm_1/joint_states", "/fleet/arm_1/joints/reach/command"} <= arm
    poses = next(e for e in entries if e["ros_topic_name"] == "/world/gazebo_poses")
    assert poses["gz_topic_name"] == f"/world/{WORLD_NAME}/dynamic_pose/info"


def test_the_plan_writes_the_world_the_models_and_the_bridge_file(tmp_path: Path) -> None:
    plan = plan_in(tmp_path)
    write_files(plan)
    assert plan.world_file == tmp_path / "gazebo" / "world.sdf"
    assert world_name_of(plan.world_file.read_text()) == WORLD_NAME
    for robot in FLEET.robots:
        model = ET.parse(tmp_path / "gazebo" / "models" / f"{robot.id}.sdf").getroot()
        assert model.find("model") is not None
    bridge = plan.nodes[0]
    assert (bridge.package, bridge.executable) == ("ros_gz_bridge", "parameter_bridge")
    config = yaml.safe_load(Path(str(bridge.parameters["config_file"])).read_text())
    assert config == bridge_entries(FLEET)


def test_start_up_spawns_every_robot_then_releases_every_grip_then_unpauses(
    tmp_path: Path,
) -> None:
    plan = plan_in(tmp_path)
    creates = [step for step in plan.steps if step.package == "ros_gz_sim"]
    assert plan.steps[: len(creates)] == creates  # every robot exists before any release
    for step, robot in zip(creates, FLEET.robots, strict=True):
        arguments = dict(zip(step.command[1::2], step.command[2::2], strict=True))
        assert step.command[0] == "create"
        assert arguments["-world"] == WORLD_NAME and arguments["-name"] == robot.id
        assert float(arguments["-x"]) == robot.start.x
        assert float(arguments["-y"]) == robot.start.y
        assert float(arguments["-Y"]) == robot.start.theta
        assert Path(arguments["-file"]) in plan.files
    releases = plan.steps[len(creates) : -1]
    expected = sum(len(carryable_items(FLEET.world, robot.type)) for robot in FLEET.robots)
    assert len(releases) == expected == 14
    assert all(step.command[:2] == ["gz", "topic"] for step in releases)
    assert all(step.command[3].endswith("/detach") for step in releases)
    unpause = plan.steps[-1].command
    assert unpause[:2] == ["gz", "service"] and "pause: false" in unpause
    assert "-r" not in plan.gz_args.split()  # paused until the grips are released


def test_headless_and_a_supplied_world(tmp_path: Path) -> None:
    assert plan_in(tmp_path, headless=True).gz_args.startswith("-s ")
    assert not plan_in(tmp_path).gz_args.startswith("-s ")
    custom = tmp_path / "mine.sdf"
    custom.write_text('<sdf version="1.9"><world name="my_hall"/></sdf>')
    plan = plan_in(tmp_path, world_file=custom)
    assert plan.world_name == "my_hall" and plan.world_file == custom
    assert custom not in plan.files
    assert plan.steps[0].command[2] == "my_hall"
    custom.write_text("<sdf><model name='no world'/></sdf>")
    with pytest.raises(ValueError, match="no <world name"):
        plan_in(tmp_path, world_file=custom)
    custom.write_text("not xml")
    with pytest.raises(ValueError, match="not valid SDF"):
        plan_in(tmp_path, world_file=custom)


def test_the_fleet_nodes_are_the_shared_plans_with_agents_on_gazebo(tmp_path: Path) -> None:
    plan = plan_in(tmp_path)
    shared = launch_plan(FLEET, fleet_file=FLEET_FILE, store_dir=tmp_path / "stores")
    fleet_nodes = plan.nodes[1:]
    assert [(n.executable, n.namespace) for n in fleet_nodes] == [
        (n.executable, n.namespace) for n in shared
    ]
    for ours, theirs in zip(fleet_nodes, shared, strict=True):
        if ours.executable == "agent_driver":
            assert ours.parameters == {**theirs.parameters, "backend": "gazebo"}
        else:
            assert ours.parameters == theirs.parameters


def test_the_gazebo_launch_file_takes_everything_from_the_plan() -> None:
    """Checked without the launch package: the file must call the shared functions."""
    tree = ast.parse((REPO / "launch" / "gazebo_fleet.launch.py").read_text())
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert {"gazebo_plan", "write_files", "gazebo_actions", "load_fleet"} <= called
    arguments = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "DeclareLaunchArgument"
        and isinstance(node.args[0], ast.Constant)
    }
    assert arguments == {"fleet", "world", "headless", "store_dir", "keyring_dir"}


def test_the_launch_actions_build_where_launch_ros_and_ros_gz_are_installed(
    tmp_path: Path,
) -> None:
    pytest.importorskip("launch_ros", reason="launch_ros is not installed here (full ROS 2)")
    packages = pytest.importorskip("ament_index_python.packages")
    try:
        packages.get_package_share_directory("ros_gz_sim")
    except (packages.PackageNotFoundError, OSError):
        # OSError: no AMENT_PREFIX_PATH at all (a venv with the launch stack, not sourced)
        pytest.skip("ros_gz_sim is not installed here (needs ros_gz)")
    from fleet_idempotency.bringup.gazebo_launch import gazebo_actions

    plan = plan_in(tmp_path, headless=True)
    actions = gazebo_actions(plan)
    # gz sim, the first step, one handler per later step, then every node of the plan.
    assert len(actions) == 1 + 1 + (len(plan.steps) - 1) + len(plan.nodes)


def test_a_fleet_with_robots_of_other_backends_is_refused_clearly(tmp_path: Path) -> None:
    fleet = load_fleet(FLEET_FILE)
    charger = {"id": "charger_1", "type": "charger", "commands": ["dock"], "backend": "charger"}
    mixed = type(fleet).model_validate(
        {**fleet.model_dump(), "robots": [*fleet.model_dump()["robots"], charger]}
    )
    with pytest.raises(ValueError, match=r"not to charger_1 \(charger, backend 'charger'\)"):
        gazebo_plan(mixed, fleet_file=FLEET_FILE, store_dir=tmp_path, output_dir=tmp_path)
