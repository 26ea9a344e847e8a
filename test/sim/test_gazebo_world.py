"""The Gazebo world and robot models generated from the fleet file, and the pose oracle.

Gazebo is not installed here, so the SDF is checked as what Gazebo reads: it parses,
every slot, station, dock, waypoint and item is a model at its coordinates, every robot
model carries the systems its backend talks to on the topics the bridge serves, and no
two models share a name.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest

from fleet_idempotency.description.fleet import load_fleet, parse_fleet
from fleet_idempotency.geometry import Pose
from fleet_idempotency.sim.gazebo_names import (
    WORLD_NAME,
    carry_topic,
    carryable_items,
    gz_topic,
    topic_token,
)
from fleet_idempotency.sim.gazebo_oracle import disagreements, items_off_slots, slots_from_poses
from fleet_idempotency.sim.gazebo_world import (
    GazeboWorldError,
    model_names,
    robot_sdf,
    world_sdf,
)
from fleet_idempotency.sim.world import World

from support.paths import FLEET_FILE

FLEET = load_fleet(FLEET_FILE)


def parsed_world() -> ET.Element:
    root = ET.fromstring(world_sdf(FLEET))
    assert root.tag == "sdf"
    world = root.find("world")
    assert world is not None and world.get("name") == WORLD_NAME
    return world


def model_pose(world: ET.Element, name: str) -> list[float]:
    models = [m for m in world.findall("model") if m.get("name") == name]
    assert len(models) == 1, f"{name}: {len(models)} models"
    pose = models[0].findtext("pose")
    assert pose is not None, f"{name} has no pose"
    return [float(value) for value in pose.split()]


def plugins(model: ET.Element, system: str) -> list[ET.Element]:
    return [p for p in model.findall("plugin") if p.get("name") == f"gz::sim::systems::{system}"]


def test_every_slot_station_dock_and_waypoint_is_a_model_at_its_coordinates() -> None:
    world = parsed_world()
    config = FLEET.world
    places = {
        **{f"slot_{name}": (slot.x, slot.y) for name, slot in config.slots.items()},
        **{f"dock_{name}": (dock.x, dock.y) for name, dock in config.docks.items()},
        **{f"waypoint_{name}": (p.x, p.y) for name, p in config.waypoints.items()},
    }
    assert len(places) == len(config.slots) + len(config.docks) + len(config.waypoints)
    for name, (x, y) in places.items():
        pose = model_pose(world, name)
        assert pose[:2] == pytest.approx([x, y]), name


def test_every_item_is_a_dynamic_model_on_its_slot() -> None:
    world = parsed_world()
    items = {slot.item: slot for slot in FLEET.world.slots.values() if slot.item is not None}
    assert len(items) == 8
    for item, slot in items.items():
        pose = model_pose(world, f"item_{item}")
        assert pose[:2] == pytest.approx([slot.x, slot.y])
        assert pose[2] > 0  # resting on the floor, not in it
        model = next(m for m in world.findall("model") if m.get("name") == f"item_{item}")
        assert model.findtext("static") != "true"  # it must be able to move
        assert model.find("link[@name='body']/inertial/mass") is not None


def test_model_names_are_unique_and_clashes_are_refused() -> None:
    world = parsed_world()
    names = [model.get("name") for model in world.findall("model")]
    assert len(names) == len(set(names))
    assert len(model_names(FLEET)) == len(set(model_names(FLEET)))
    clashing = parse_fleet(
        {
            "world": {"slots": {"A1": {"x": 1, "y": 1}}},
            "robots": [{"id": "slot_A1", "type": "amr"}],
        }
    )
    with pytest.raises(GazeboWorldError, match=r"\['slot_A1'\]"):
        world_sdf(clashing)


def test_the_world_has_the_systems_spawning_and_the_pose_oracle_need() -> None:
    world = parsed_world()
    names = {plugin.get("name") for plugin in world.findall("plugin")}
    assert {
        "gz::sim::systems::Physics",
        "gz::sim::systems::UserCommands",
        "gz::sim::systems::SceneBroadcaster",
    } <= names


@pytest.mark.parametrize("robot_id", [robot.id for robot in FLEET.robots])
def test_every_robot_model_parses_and_talks_on_the_backends_topics(robot_id: str) -> None:
    robot = FLEET.robot(robot_id)
    model = ET.fromstring(robot_sdf(FLEET, robot)).find("model")
    assert model is not None and model.get("name") == robot_id
    if robot.type == "arm":
        joints = {j.get("name"): j.get("type") for j in model.findall("joint")}
        assert joints == {"anchor": "fixed", "shoulder_yaw": "revolute", "reach": "prismatic"}
        controllers = plugins(model, "JointPositionController")
        assert {c.findtext("topic") for c in controllers} == {
            f"/model/{robot_id}/joints/shoulder_yaw/command",
            f"/model/{robot_id}/joints/reach/command",
        }
        states = plugins(model, "JointStatePublisher")
        assert [s.findtext("topic") for s in states] == [f"/model/{robot_id}/joint_states"]
        reach = model.find("joint[@name='reach']/axis/limit/upper")
        assert reach is not None and float(reach.text or 0) == 1.5
    else:
        (velocity,) = plugins(model, "VelocityControl")
        assert velocity.findtext("topic") == f"/model/{robot_id}/cmd_vel"
        (odometry,) = plugins(model, "OdometryPublisher")
        assert odometry.findtext("odom_topic") == f"/model/{robot_id}/odom"
    grips = plugins(model, "DetachableJoint")
    items = carryable_items(FLEET.world, robot.type)
    assert [g.findtext("child_model") for g in grips] == [f"item_{item}" for item in items]
    for grip, item in zip(grips, items, strict=True):
        assert grip.findtext("attach_topic") == gz_topic(robot_id, carry_topic(item, "attach"))
        assert grip.findtext("detach_topic") == gz_topic(robot_id, carry_topic(item, "detach"))
        link = grip.findtext("parent_link")
        assert model.find(f"link[@name='{link}']") is not None


def test_forklifts_may_hold_pallets_arms_station_items_and_amrs_nothing() -> None:
    assert carryable_items(FLEET.world, "forklift") == [f"P-{n}" for n in range(1, 7)]
    assert carryable_items(FLEET.world, "arm") == ["I-1", "I-2"]
    assert carryable_items(FLEET.world, "amr") == []


@pytest.mark.parametrize(
    ("name", "token"),
    [("P-1", "P_d1"), ("P_1", "P__1"), ("P.1", "P_p1"), ("a_-b", "a___db")],
)
def test_topic_tokens_are_valid_ros_names_and_one_to_one(name: str, token: str) -> None:
    assert topic_token(name) == token
    assert carry_topic(name, "attach") == f"carry/item_{token}/attach"


# --- the oracle -----------------------------------------------------------------------------
def test_gazebo_poses_read_back_as_slot_contents_and_agree_with_the_world() -> None:
    world = World(FLEET.world)
    world.act("forklift_1", "k1", "pick", "A1", Pose(x=6.0, y=6.0))
    world.act("forklift_1", "k2", "place", "B1", Pose(x=6.0, y=9.0))
    positions = {
        f"item_{slot.item}": (slot.x, slot.y)
        for slot in FLEET.world.slots.values()
        if slot.item is not None
    }
    positions["item_P-1"] = (6.1, 9.05)  # placed on B1, a little off centre
    gazebo = slots_from_poses(FLEET.world, positions)
    assert gazebo["A1"] is None and gazebo["B1"] == "P-1"
    assert disagreements(world.snapshot()["slots"], gazebo) == []
    assert items_off_slots(FLEET.world, positions) == []


def test_the_oracle_sees_a_pallet_gazebo_did_not_move_or_that_is_held() -> None:
    world = World(FLEET.world)
    world.act("forklift_1", "k1", "pick", "A1", Pose(x=6.0, y=6.0))
    positions = {
        f"item_{slot.item}": (slot.x, slot.y)
        for slot in FLEET.world.slots.values()
        if slot.item is not None
    }
    # Gazebo still shows P-1 on A1: the grip was lost, world and physics disagree.
    assert disagreements(world.snapshot()["slots"], slots_from_poses(FLEET.world, positions)) == [
        "A1: world None, Gazebo 'P-1'"
    ]
    positions["item_P-1"] = (3.0, 4.2)  # on the forks, between slots
    assert items_off_slots(FLEET.world, positions) == ["P-1"]
    del positions["item_P-2"]
    assert items_off_slots(FLEET.world, positions) == ["P-1", "P-2"]
