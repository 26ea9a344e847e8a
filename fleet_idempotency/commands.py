"""Command types, their payloads, and which robot types can execute them.

Payloads are validated with pydantic models that forbid unknown fields: a typo such as
``{"slott": "A1"}`` must be a 400, never a pick of whatever the default would be.
No ROS imports: the agent, the orchestrator and the tools share these rules.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fleet_idempotency.store.errors import InvalidRequest
from fleet_idempotency.store.fingerprint import parse_json

NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"

MOVE_TO_WAYPOINT: Final = "move_to_waypoint"
PICK: Final = "pick"
PLACE: Final = "place"
DOCK: Final = "dock"
COMMAND_TYPES: Final = (MOVE_TO_WAYPOINT, PICK, PLACE, DOCK)
CommandType = Literal["move_to_waypoint", "pick", "place", "dock"]

ROBOT_CAPABILITIES: Final[dict[str, frozenset[str]]] = {
    "amr": frozenset({MOVE_TO_WAYPOINT, DOCK}),
    "forklift": frozenset({MOVE_TO_WAYPOINT, PICK, PLACE, DOCK}),
    # An arm is bolted to the floor: it transfers items between stations within reach.
    "arm": frozenset({PICK, PLACE}),
}


class InvalidCommand(ValueError):
    """A command that must be refused with a 400 before anything is stored or executed."""

    status_code = 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = f"{field}: {message}"


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class MoveToWaypoint(_Payload):
    """Either a named waypoint or absolute coordinates in the world frame (metres)."""

    waypoint: str | None = Field(default=None, pattern=NAME_PATTERN)
    x: float | None = None
    y: float | None = None

    @model_validator(mode="after")
    def _one_target(self) -> MoveToWaypoint:
        has_coordinates = self.x is not None or self.y is not None
        if self.waypoint is not None and has_coordinates:
            raise ValueError("give either 'waypoint' or 'x' and 'y', not both")
        if self.waypoint is None and (self.x is None or self.y is None):
            raise ValueError("give 'waypoint', or both 'x' and 'y'")
        for value in (self.x, self.y):
            if value is not None and not math.isfinite(value):
                raise ValueError("coordinates must be finite numbers")
        return self


class Pick(_Payload):
    slot: str = Field(pattern=NAME_PATTERN)


class Place(_Payload):
    slot: str = Field(pattern=NAME_PATTERN)


class Dock(_Payload):
    dock: str = Field(pattern=NAME_PATTERN)


Payload = MoveToWaypoint | Pick | Place | Dock
PAYLOAD_MODELS: Final[dict[str, type[_Payload]]] = {
    MOVE_TO_WAYPOINT: MoveToWaypoint,
    PICK: Pick,
    PLACE: Place,
    DOCK: Dock,
}


def parse_json_object(payload_json: str, field: str = "payload_json") -> dict[str, Any]:
    """Parse a JSON object, rejecting anything else with a message naming the problem.

    Nesting is bounded before decoding (``MAX_JSON_DEPTH``) and NaN/Infinity refused, by
    the same rules as the store's, so a payload the store would refuse is refused here.
    """
    try:
        value = parse_json(field, payload_json)
    except InvalidRequest as invalid:
        raise InvalidCommand(field, invalid.reason) from None
    if not isinstance(value, dict):
        raise InvalidCommand(field, f"must be a JSON object, got {type(value).__name__}")
    return value


def parse_payload(command_type: str, payload_json: str) -> Payload:
    """Validate a command's payload for its type; raise InvalidCommand naming the field."""
    model = PAYLOAD_MODELS.get(command_type)
    if model is None:
        raise InvalidCommand(
            "command_type",
            f"unknown command type {command_type!r} (known: {', '.join(COMMAND_TYPES)})",
        )
    fields = parse_json_object(payload_json)
    try:
        return model.model_validate(fields)  # type: ignore[return-value]
    except ValidationError as error:
        first = error.errors()[0]
        location = ".".join(str(part) for part in first["loc"]) or "payload_json"
        raise InvalidCommand(
            f"payload_json.{location}" if first["loc"] else location, first["msg"]
        ) from None


def check_capability(
    robot_type: str, command_type: str, supported: frozenset[str] | None = None
) -> None:
    """Refuse a command type the robot cannot execute (400, before any side effect).
    ``supported``: what this robot accepts (its fleet entry or backend says); None: what
    its type's simulated kind accepts."""
    if supported is None:
        supported = ROBOT_CAPABILITIES.get(robot_type)
    if supported is None:
        raise InvalidCommand("robot_type", f"unknown robot type {robot_type!r}")
    if command_type not in supported:
        raise InvalidCommand(
            "command_type",
            f"a {robot_type} cannot {command_type} (it supports: {', '.join(sorted(supported))})",
        )


def validate_command(
    robot_type: str,
    command_type: str,
    payload_json: str,
    *,
    max_payload_bytes: int,
    supported: frozenset[str] | None = None,
) -> Payload:
    """Everything a command can get wrong before it is stored: size, payload, capability."""
    size = len(payload_json.encode())
    if size > max_payload_bytes:  # checked before parsing: never spend time on a huge payload
        raise InvalidCommand(
            "payload_json", f"{size} bytes exceeds the {max_payload_bytes}-byte limit"
        )
    payload = parse_payload(command_type, payload_json)
    check_capability(robot_type, command_type, supported)
    return payload
