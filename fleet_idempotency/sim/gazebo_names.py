"""Names shared by the generated Gazebo world, the ros_gz bridge and the robots' ROS wiring.

One place decides every model name and topic, so the world's plugins, the bridge's
entries and the topics the Gazebo backend uses cannot disagree. No ROS imports.

Fleet names may contain ``-`` and ``.`` (``P-1``), which ROS topic names forbid, so an
item appears in topics as a token: ``_`` doubled, ``-`` as ``_d``, ``.`` as ``_p``. The
encoding is one-to-one, so two items never share a topic.
"""

from __future__ import annotations

from typing import Final, Literal

from fleet_idempotency.description.layout import WorldConfig

ROBOT_NAMESPACE: Final = "/fleet"
WORLD_NAME: Final = "fleet_warehouse"

# Relative to a robot's namespace on the ROS side, and to /model/<robot> on the Gazebo side.
CMD_VEL: Final = "cmd_vel"
ODOMETRY: Final = "odom"
JOINT_STATES: Final = "joint_states"

# The arm: a yaw joint at the base and a prismatic joint that sets the gripper's radius.
ARM_YAW_JOINT: Final = "shoulder_yaw"
ARM_REACH_JOINT: Final = "reach"
ARM_JOINTS: Final = (ARM_YAW_JOINT, ARM_REACH_JOINT)

CarryAction = Literal["attach", "detach"]
_ESCAPES: Final = {"_": "__", "-": "_d", ".": "_p"}


def topic_token(name: str) -> str:
    """A fleet name (``[A-Za-z0-9_.-]``) as a ROS name token, one-to-one."""
    encoded = "".join(_ESCAPES.get(char, char) for char in name)
    if not encoded or not all(
        char.isascii() and (char.isalnum() or char == "_") for char in encoded
    ):
        raise ValueError(f"{name!r} cannot be used in a topic name")
    return encoded


def carryable_items(config: WorldConfig, robot_type: str) -> list[str]:
    """Items a robot of this type can ever hold: forklifts move pallets, arms station items.

    Items are conserved and stay within their kind of slot, so the items at the start are
    all there will ever be; each gets its own attach/detach pair (Gazebo's DetachableJoint
    names its child model in the SDF).
    """
    kind = {"forklift": "pallet", "arm": "station"}.get(robot_type)
    return sorted(
        slot.item for slot in config.slots.values() if slot.kind == kind and slot.item is not None
    )


def robot_namespace(robot_id: str) -> str:
    return f"{ROBOT_NAMESPACE}/{robot_id}"


def joint_command(joint: str) -> str:
    return f"joints/{joint}/command"


def carry_topic(item: str, action: CarryAction) -> str:
    """Where a robot asks Gazebo to attach or release one item (one DetachableJoint each)."""
    return f"carry/item_{topic_token(item)}/{action}"


def ros_topic(robot_id: str, relative: str) -> str:
    return f"{robot_namespace(robot_id)}/{relative}"


def gz_topic(robot_id: str, relative: str) -> str:
    return f"/model/{robot_id}/{relative}"


# Model names by kind: the prefixes keep an item, a slot and a dock of the same name apart.
def item_model(item: str) -> str:
    return f"item_{item}"


def slot_model(slot: str) -> str:
    return f"slot_{slot}"


def dock_model(dock: str) -> str:
    return f"dock_{dock}"


def waypoint_model(waypoint: str) -> str:
    return f"waypoint_{waypoint}"


ITEM_LINK: Final = "body"
CARRIER_LINK: Final = "base_link"  # AMR and forklift: what a pallet is fixed to
GRIPPER_LINK: Final = "gripper"  # the arm


def pose_topic(world_name: str = WORLD_NAME) -> str:
    """Gazebo's poses of every dynamic model (the scene broadcaster publishes it)."""
    return f"/world/{world_name}/dynamic_pose/info"


GAZEBO_POSES_ROS_TOPIC: Final = "/world/gazebo_poses"
