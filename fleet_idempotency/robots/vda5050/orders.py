"""Fleet commands as VDA 5050 orders, with every id derived from the idempotency key.

``orderId`` is the robot's key, ``<client>:<key>`` (printable ASCII, unique per robot: the
store guarantees one execution per key, and its tombstones keep an expired key from coming
back), each ``actionId`` is ``<orderId>/<actionType>``, and ``orderUpdateId`` is 0: this
master control never updates an order, it sends one order per command. Every re-send of an
order carries the same content (the start node where the vehicle stood at the first send)
under a new headerId and timestamp (2.1 section 6.4: the headerId is incremented with each
sent message), so the vehicle's rule for a repeated ``orderId``/``orderUpdateId`` (2.1
section 6.6.4.3, 3.0 section 6.1.4.5: ignore it) applies.

The order: a first node where the vehicle stands (a temporary node within its deviation
range, 2.1 section 6.6.3.1), one edge, and the target node, named as the fleet's layout
names it, carrying the action: ``pick``/``drop`` for pick/place (predefined actions,
2.1 section 6.8.1), the docking action the vehicle's factsheet offers for dock, none for
a move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleet_idempotency.commands import (
    DOCK,
    MOVE_TO_WAYPOINT,
    PICK,
    PLACE,
    Dock,
    MoveToWaypoint,
    Payload,
    Pick,
    Place,
)
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.backend import Command
from fleet_idempotency.robots.targets import Target
from fleet_idempotency.vda5050.wire import encode, timestamp

START_NODE_ID = "here"
# The action a command type becomes (None: a plain move); dock is resolved per vehicle.
ACTION_OF: dict[str, str | None] = {MOVE_TO_WAYPOINT: None, PICK: "pick", PLACE: "drop"}


def order_id(key: str) -> str:
    return key


def action_id(key: str, action_type: str) -> str:
    return f"{key}/{action_type}"


def target_name(payload: Payload) -> str:
    """The target's name as ``targets.resolve_target`` names it."""
    if isinstance(payload, MoveToWaypoint):
        if payload.waypoint is not None:
            return payload.waypoint
        return f"{payload.x:g},{payload.y:g}"
    if isinstance(payload, Dock):
        return payload.dock
    assert isinstance(payload, Pick | Place)
    return payload.slot


@dataclass(frozen=True)
class OrderPlan:
    """What the backend expects of one command's order."""

    key: str
    order_id: str
    target: str  # the last node's id
    action_type: str | None  # the vehicle's action at the target, if any
    # Where the target is, when the layout says: the vehicle must end within
    # ``deviation_xy`` of it (when it reports its position) for the order to count as done.
    target_xy: tuple[float, float] | None = None
    deviation_xy: float = 0.5

    @property
    def action_ids(self) -> tuple[str, ...]:
        if self.action_type is None:
            return ()
        return (action_id(self.key, self.action_type),)


def plan_for(
    command: Command,
    dock_action: str | None,
    target: Target | None = None,
    deviation_xy: float = 0.5,
) -> OrderPlan:
    action = dock_action if command.command_type == DOCK else ACTION_OF[command.command_type]
    return OrderPlan(
        key=command.key,
        order_id=order_id(command.key),
        target=target_name(command.payload),
        action_type=action,
        target_xy=None if target is None else (target.x, target.y),
        deviation_xy=deviation_xy,
    )


@dataclass(frozen=True)
class Header:
    version: str
    manufacturer: str
    serial_number: str


def build_order(
    plan: OrderPlan,
    target: Target,
    *,
    here: Pose,
    header_id: int,
    header: Header,
    map_id: str,
) -> bytes:
    """The order message under ``header_id``, stamped now; 3.0's layout when the header's
    version is 3 (an ellipse for the allowed deviation; edges connected by sequence ids)."""
    v3 = header.version.startswith("3")
    deviation: float | dict[str, float] = (
        {"a": plan.deviation_xy, "b": plan.deviation_xy, "theta": 0.0} if v3 else plan.deviation_xy
    )
    actions: list[dict[str, Any]] = []
    if plan.action_type is not None:
        actions.append(
            {
                "actionType": plan.action_type,
                "actionId": action_id(plan.key, plan.action_type),
                "blockingType": "HARD",
                "actionParameters": [{"key": "target", "value": plan.target}],
            }
        )
    nodes = [
        {
            "nodeId": START_NODE_ID,
            "sequenceId": 0,
            "released": True,
            "nodePosition": {
                "x": round(here.x, 3),
                "y": round(here.y, 3),
                "mapId": map_id,
                "allowedDeviationXY": deviation,
            },
            "actions": [],
        },
        {
            "nodeId": plan.target,
            "sequenceId": 2,
            "released": True,
            "nodePosition": {
                "x": target.x,
                "y": target.y,
                "mapId": map_id,
                "allowedDeviationXY": deviation,
            },
            "actions": actions,
        },
    ]
    edge: dict[str, Any] = {
        "edgeId": f"{START_NODE_ID}->{plan.target}",
        "sequenceId": 1,
        "released": True,
    }
    if not v3:
        edge |= {"startNodeId": START_NODE_ID, "endNodeId": plan.target}
    edge["actions"] = []
    return encode(
        {
            "headerId": header_id,
            "timestamp": timestamp(),
            "version": header.version,
            "manufacturer": header.manufacturer,
            "serialNumber": header.serial_number,
            "orderId": plan.order_id,
            "orderUpdateId": 0,
            "nodes": nodes,
            "edges": [edge],
        }
    )


def instant_actions(actions: list[tuple[str, str]], *, header_id: int, header: Header) -> bytes:
    """An ``instantActions`` message of (actionId, actionType) pairs without parameters."""
    return encode(
        {
            "headerId": header_id,
            "timestamp": timestamp(),
            "version": header.version,
            "manufacturer": header.manufacturer,
            "serialNumber": header.serial_number,
            "actions": [
                {"actionId": action_id_, "actionType": action_type, "blockingType": "NONE"}
                for action_id_, action_type in actions
            ],
        }
    )
