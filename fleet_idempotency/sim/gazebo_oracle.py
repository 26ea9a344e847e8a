"""The side-effect oracle of Gazebo runs: where the items really are.

Gazebo publishes the pose of every dynamic model (bridged to ROS as tf2_msgs/TFMessage
on ``/world/gazebo_poses``, each model's name as ``child_frame_id``). An item within
``tolerance_m`` of a slot lies in that slot; any other is held by a robot or was
dropped. The slots read from Gazebo must equal the kinematic world's: a command executed
twice, or a grip Gazebo did not follow, shows up as a pallet where the world says none
is. No ROS imports: the test that needs Gazebo feeds it the bridged poses.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.sim.gazebo_names import item_model

DEFAULT_TOLERANCE_M = 0.3


def slots_from_poses(
    config: WorldConfig,
    model_positions: Mapping[str, tuple[float, float]],
    tolerance_m: float = DEFAULT_TOLERANCE_M,
) -> dict[str, str | None]:
    """Each slot's item according to Gazebo (None: nothing lies there)."""
    slots: dict[str, str | None] = dict.fromkeys(config.slots)
    for item in _items(config):
        position = model_positions.get(item_model(item))
        if position is None:
            continue
        slot = _slot_at(config, position, tolerance_m)
        if slot is not None:
            slots[slot] = item
    return slots


def items_off_slots(
    config: WorldConfig,
    model_positions: Mapping[str, tuple[float, float]],
    tolerance_m: float = DEFAULT_TOLERANCE_M,
) -> list[str]:
    """Items lying on no slot (carried, dropped) or missing from Gazebo's poses."""
    return [
        item
        for item in _items(config)
        if (position := model_positions.get(item_model(item))) is None
        or _slot_at(config, position, tolerance_m) is None
    ]


def disagreements(
    world_slots: Mapping[str, str | None], gazebo_slots: Mapping[str, str | None]
) -> list[str]:
    """Slots where the kinematic world and Gazebo do not hold the same item."""
    return [
        f"{slot}: world {world_slots.get(slot)!r}, Gazebo {gazebo_slots.get(slot)!r}"
        for slot in sorted(set(world_slots) | set(gazebo_slots))
        if world_slots.get(slot) != gazebo_slots.get(slot)
    ]


def _items(config: WorldConfig) -> list[str]:
    return sorted(slot.item for slot in config.slots.values() if slot.item is not None)


def _slot_at(config: WorldConfig, position: tuple[float, float], tolerance_m: float) -> str | None:
    x, y = position
    for name, slot in config.slots.items():
        if (slot.x - x) ** 2 + (slot.y - y) ** 2 <= tolerance_m**2:
            return name
    return None
