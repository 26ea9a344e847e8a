"""What every backend does alike: check a command before anything moves, shape its result.

Shared by the kinematic and the Gazebo robots, so that the same payload is refused for
the same reason, and answered with the same body, whichever backend runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleet_idempotency.commands import (
    Dock,
    InvalidCommand,
    MoveToWaypoint,
    Payload,
    Pick,
    Place,
    check_capability,
)
from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.backend import Command, CommandRefused


@dataclass(frozen=True)
class Target:
    name: str  # waypoint, dock or slot name; "x,y" for an absolute move
    x: float
    y: float


def refuse_unsupported(robot_type: str, command_type: str) -> None:
    """CommandRefused for a command type this robot type cannot execute."""
    try:
        check_capability(robot_type, command_type)
    except InvalidCommand as refusal:
        raise CommandRefused(refusal.message) from None


def resolve_target(
    geometry: WorldConfig,
    payload: Payload,
    *,
    robot_type: str,
    reach_m: float,
    mobile: bool,
    pose: Pose,
) -> Target:
    """Resolve the payload's target in the world; raise CommandRefused if it is not valid."""
    if isinstance(payload, MoveToWaypoint):
        if payload.waypoint is None:
            assert payload.x is not None and payload.y is not None
            return Target(f"{payload.x:g},{payload.y:g}", payload.x, payload.y)
        point = geometry.waypoints.get(payload.waypoint)
        if point is None:
            raise CommandRefused(f"unknown waypoint {payload.waypoint!r}")
        return Target(payload.waypoint, point.x, point.y)
    if isinstance(payload, Dock):
        dock = geometry.docks.get(payload.dock)
        if dock is None:
            raise CommandRefused(f"unknown dock {payload.dock!r}")
        return Target(payload.dock, dock.x, dock.y)
    assert isinstance(payload, Pick | Place)
    slot = geometry.slots.get(payload.slot)
    if slot is None:
        raise CommandRefused(f"unknown slot {payload.slot!r}")
    wanted = "station" if robot_type == "arm" else "pallet"
    if slot.kind != wanted:
        raise CommandRefused(
            f"slot {payload.slot!r} is a {slot.kind} slot; a {robot_type} handles {wanted} slots"
        )
    distance = pose.distance_to(slot.x, slot.y)
    if not mobile and distance > reach_m:
        raise CommandRefused(
            f"slot {payload.slot!r} is out of reach ({distance:.1f} m > {reach_m} m)"
        )
    return Target(payload.slot, slot.x, slot.y)


def result_body(
    robot_id: str, command: Command, target: str, pose: Pose, **extra: Any
) -> dict[str, Any]:
    """The JSON-able result of a completed command, the same for every backend."""
    return {
        "robot_id": robot_id,
        "command_type": command.command_type,
        "target": target,
        "pose": {"x": round(pose.x, 3), "y": round(pose.y, 3), "theta": round(pose.theta, 3)},
        **extra,
    }
