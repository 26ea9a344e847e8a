"""The fleet description as Gazebo SDF: the warehouse world and one model per robot.

The world holds the floor, a flat marker for every slot, station, dock and waypoint at
its coordinates, and every item (pallet or station item) as a model of its own, so that
Gazebo's poses of the items are the physical record of what was moved. Robots are
separate models, spawned into the running world (``ros_gz_sim create``):

- AMR and forklift: a box base driven by Gazebo's VelocityControl system (``cmd_vel``),
  its world pose published by the OdometryPublisher system (``odom``);
- arm: fixed to the floor, a ``shoulder_yaw`` revolute and a ``reach`` prismatic joint,
  each with a JointPositionController, and a JointStatePublisher;
- one DetachableJoint per item the robot can hold, attached and released on the
  ``carry/item_<item>/{attach,detach}`` topics.

Items do not collide with robot bodies (collide bitmasks): a robot drives under its
pallet as a pallet-lifting AMR would. Plain Python (xml.etree); names from gazebo_names.
"""

from __future__ import annotations

from collections import Counter
from typing import Final
from xml.etree import ElementTree as ET

from fleet_idempotency.description.fleet import FleetConfig, RobotSpec
from fleet_idempotency.sim.gazebo_names import (
    ARM_JOINTS,
    ARM_REACH_JOINT,
    ARM_YAW_JOINT,
    CARRIER_LINK,
    CMD_VEL,
    GRIPPER_LINK,
    ITEM_LINK,
    JOINT_STATES,
    ODOMETRY,
    WORLD_NAME,
    carry_topic,
    carryable_items,
    dock_model,
    gz_topic,
    item_model,
    joint_command,
    slot_model,
    waypoint_model,
)
from fleet_idempotency.sim.profiles import PROFILES

SDF_VERSION: Final = "1.9"
ROBOT_BITMASK: Final = "0x01"
ITEM_BITMASK: Final = "0x02"
PALLET_SIZE: Final = (1.2, 1.0, 0.15)
STATION_ITEM_SIZE: Final = (0.2, 0.2, 0.2)
BASE_SIZE: Final = {"amr": (0.8, 0.6, 0.3), "forklift": (1.4, 0.9, 0.5)}
ARM_HEIGHT_M: Final = 0.7
COLOURS: Final = {
    "pallet": "0.8 0.6 0.2 1",
    "station": "0.2 0.6 0.8 1",
    "dock": "0.2 0.8 0.2 1",
    "waypoint": "0.6 0.6 0.6 1",
    "amr": "0.9 0.3 0.1 1",
    "forklift": "0.95 0.8 0.1 1",
    "arm": "0.4 0.4 0.9 1",
}


class GazeboWorldError(ValueError):
    """The fleet cannot be turned into a Gazebo world (two models would share a name)."""


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attributes: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attributes)
    if text is not None:
        element.text = text
    return element


def _pose(parent: ET.Element, x: float, y: float, z: float, yaw: float = 0.0) -> None:
    _sub(parent, "pose", f"{x:g} {y:g} {z:g} 0 0 {yaw:g}")


def _box_geometry(parent: ET.Element, size: tuple[float, float, float]) -> None:
    _sub(_sub(_sub(parent, "geometry"), "box"), "size", " ".join(f"{s:g}" for s in size))


def _visual(link: ET.Element, size: tuple[float, float, float], colour: str) -> None:
    visual = _sub(link, "visual", name="visual")
    _box_geometry(visual, size)
    material = _sub(visual, "material")
    _sub(material, "ambient", colour)
    _sub(material, "diffuse", colour)


def _collision(link: ET.Element, size: tuple[float, float, float], bitmask: str) -> None:
    collision = _sub(link, "collision", name="collision")
    _box_geometry(collision, size)
    surface = _sub(collision, "surface")
    _sub(_sub(surface, "contact"), "collide_bitmask", bitmask)
    if bitmask == ROBOT_BITMASK:  # a velocity-controlled base slides; friction only fights it
        ode = _sub(_sub(surface, "friction"), "ode")
        _sub(ode, "mu", "0")
        _sub(ode, "mu2", "0")


def _inertial(link: ET.Element, mass: float, size: tuple[float, float, float]) -> None:
    inertial = _sub(link, "inertial")
    _sub(inertial, "mass", f"{mass:g}")
    inertia = _sub(inertial, "inertia")
    x, y, z = size
    for name, value in (
        ("ixx", mass * (y * y + z * z) / 12),
        ("iyy", mass * (x * x + z * z) / 12),
        ("izz", mass * (x * x + y * y) / 12),
    ):
        _sub(inertia, name, f"{value:.6g}")


def _plugin(parent: ET.Element, system: str, library: str, **elements: str) -> ET.Element:
    plugin = _sub(parent, "plugin", filename=f"gz-sim-{library}-system", name=system)
    for tag, text in elements.items():
        _sub(plugin, tag, text)
    return plugin


def _document(child: ET.Element) -> str:
    root = ET.Element("sdf", version=SDF_VERSION)
    root.append(child)
    ET.indent(root)
    return '<?xml version="1.0"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# --- the world ------------------------------------------------------------------------------
def model_names(fleet: FleetConfig) -> list[str]:
    """Every model the world and the spawned robots will hold, in a stable order."""
    world = fleet.world
    names = ["ground_plane"]
    names += [slot_model(name) for name in world.slots]
    names += [dock_model(name) for name in world.docks]
    names += [waypoint_model(name) for name in world.waypoints]
    names += [item_model(slot.item) for slot in world.slots.values() if slot.item is not None]
    names += [robot.id for robot in fleet.robots]
    return names


def check_unique_names(fleet: FleetConfig) -> None:
    repeated = sorted(name for name, count in Counter(model_names(fleet)).items() if count > 1)
    if repeated:
        raise GazeboWorldError(
            f"these Gazebo model names would be used twice: {repeated} "
            "(a robot id clashes with a generated slot_/dock_/waypoint_/item_ name)"
        )


def _marker(
    world: ET.Element, name: str, at: tuple[float, float], size: float, colour: str
) -> None:
    model = _sub(world, "model", name=name)
    _sub(model, "static", "true")
    _pose(model, *at, 0.005)
    _visual(_sub(model, "link", name="marker"), (size, size, 0.01), colour)


def _item(world: ET.Element, item: str, x: float, y: float, kind: str) -> None:
    size = PALLET_SIZE if kind == "pallet" else STATION_ITEM_SIZE
    model = _sub(world, "model", name=item_model(item))
    _pose(model, x, y, size[2] / 2)
    link = _sub(model, "link", name=ITEM_LINK)
    _inertial(link, 20.0 if kind == "pallet" else 1.0, size)
    _collision(link, size, ITEM_BITMASK)
    _visual(link, size, COLOURS[kind])


def world_sdf(fleet: FleetConfig, world_name: str = WORLD_NAME) -> str:
    """The warehouse as an SDF world: floor, markers at every named place, every item."""
    check_unique_names(fleet)
    world = ET.Element("world", name=world_name)
    physics = _sub(world, "physics", name="1ms", type="ignored")
    _sub(physics, "max_step_size", "0.001")
    _sub(physics, "real_time_factor", "1.0")
    _plugin(world, "gz::sim::systems::Physics", "physics")
    _plugin(world, "gz::sim::systems::UserCommands", "user-commands")  # create, set_pose
    _plugin(world, "gz::sim::systems::SceneBroadcaster", "scene-broadcaster")  # dynamic poses
    sun = _sub(world, "light", type="directional", name="sun")
    _sub(sun, "cast_shadows", "true")
    _pose(sun, 0, 0, 10)
    _sub(sun, "direction", "-0.5 0.1 -0.9")
    ground = _sub(world, "model", name="ground_plane")
    _sub(ground, "static", "true")
    ground_link = _sub(ground, "link", name="link")
    for tag in ("collision", "visual"):
        element = _sub(ground_link, tag, name=tag)
        plane = _sub(_sub(element, "geometry"), "plane")
        _sub(plane, "normal", "0 0 1")
        _sub(plane, "size", "200 200")
    config = fleet.world
    for name, slot in config.slots.items():
        _marker(world, slot_model(name), (slot.x, slot.y), 1.4, COLOURS[slot.kind])
    for name, dock in config.docks.items():
        _marker(world, dock_model(name), (dock.x, dock.y), 1.0, COLOURS["dock"])
    for name, point in config.waypoints.items():
        _marker(world, waypoint_model(name), (point.x, point.y), 0.4, COLOURS["waypoint"])
    for slot in config.slots.values():
        if slot.item is not None:
            _item(world, slot.item, slot.x, slot.y, slot.kind)
    return _document(world)


# --- the robots -----------------------------------------------------------------------------
def _carry_joints(model: ET.Element, fleet: FleetConfig, robot: RobotSpec, parent: str) -> None:
    for item in carryable_items(fleet.world, robot.type):
        _plugin(
            model,
            "gz::sim::systems::DetachableJoint",
            "detachable-joint",
            parent_link=parent,
            child_model=item_model(item),
            child_link=ITEM_LINK,
            attach_topic=gz_topic(robot.id, carry_topic(item, "attach")),
            detach_topic=gz_topic(robot.id, carry_topic(item, "detach")),
            output_topic=gz_topic(robot.id, f"carry/{item_model(item)}/state"),
        )


def _mobile_robot(model: ET.Element, robot: RobotSpec) -> None:
    size = BASE_SIZE[robot.type]
    link = _sub(model, "link", name=CARRIER_LINK)
    _pose(link, 0, 0, size[2] / 2 + 0.01)
    _inertial(link, 80.0, size)
    _collision(link, size, ROBOT_BITMASK)
    _visual(link, size, COLOURS[robot.type])
    _plugin(
        model,
        "gz::sim::systems::VelocityControl",
        "velocity-control",
        topic=gz_topic(robot.id, CMD_VEL),
    )
    _plugin(
        model,
        "gz::sim::systems::OdometryPublisher",
        "odometry-publisher",
        odom_topic=gz_topic(robot.id, ODOMETRY),
        odom_frame=f"{robot.id}/odom",
        robot_base_frame=f"{robot.id}/{CARRIER_LINK}",
        odom_publish_frequency="50",
        dimensions="2",
    )


def _arm(model: ET.Element, robot: RobotSpec) -> None:
    reach = PROFILES["arm"].reach_m
    base = _sub(model, "link", name="base")
    _pose(base, 0, 0, ARM_HEIGHT_M / 2)
    _inertial(base, 200.0, (0.5, 0.5, ARM_HEIGHT_M))
    _visual(base, (0.5, 0.5, ARM_HEIGHT_M), COLOURS["arm"])
    anchor = _sub(model, "joint", name="anchor", type="fixed")
    _sub(anchor, "parent", "world")
    _sub(anchor, "child", "base")
    boom = _sub(model, "link", name="boom")
    _pose(boom, reach / 2, 0, ARM_HEIGHT_M + 0.05)
    _inertial(boom, 5.0, (reach, 0.1, 0.1))
    _visual(boom, (reach, 0.1, 0.1), COLOURS["arm"])
    # At the base's axis when the reach joint is 0: its position is the gripper's radius.
    gripper = _sub(model, "link", name=GRIPPER_LINK)
    _pose(gripper, 0, 0, ARM_HEIGHT_M - 0.05)
    _inertial(gripper, 1.0, (0.15, 0.15, 0.1))
    _visual(gripper, (0.15, 0.15, 0.1), "0.2 0.2 0.2 1")
    for name, kind, parent, child, axis, (lower, upper) in (
        (ARM_YAW_JOINT, "revolute", "base", "boom", "0 0 1", (-3.15, 3.15)),
        (ARM_REACH_JOINT, "prismatic", "boom", GRIPPER_LINK, "1 0 0", (0.0, reach)),
    ):
        joint = _sub(model, "joint", name=name, type=kind)
        _sub(joint, "parent", parent)
        _sub(joint, "child", child)
        axis_element = _sub(joint, "axis")
        _sub(axis_element, "xyz", axis)
        limit = _sub(axis_element, "limit")
        _sub(limit, "lower", f"{lower:g}")
        _sub(limit, "upper", f"{upper:g}")
    for joint_name in ARM_JOINTS:
        _plugin(
            model,
            "gz::sim::systems::JointPositionController",
            "joint-position-controller",
            joint_name=joint_name,
            topic=gz_topic(robot.id, joint_command(joint_name)),
            p_gain="200",
            d_gain="20",
        )
    states = _plugin(
        model,
        "gz::sim::systems::JointStatePublisher",
        "joint-state-publisher",
        topic=gz_topic(robot.id, JOINT_STATES),
    )
    for joint_name in ARM_JOINTS:
        _sub(states, "joint_name", joint_name)


def robot_sdf(fleet: FleetConfig, robot: RobotSpec) -> str:
    """One robot's model, to be spawned at its start pose."""
    model = ET.Element("model", name=robot.id)
    if robot.type == "arm":
        _arm(model, robot)
        _carry_joints(model, fleet, robot, GRIPPER_LINK)
    else:
        _mobile_robot(model, robot)
        _carry_joints(model, fleet, robot, CARRIER_LINK)
    return _document(model)
