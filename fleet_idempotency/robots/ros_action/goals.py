"""Goals from commands and outcomes from results, for the ``ros_action`` backend. No ROS.

- **The goal UUID is derived from the robot key** (``goal_uuid``: uuid5 of the robot id
  and key under a fixed namespace). The key is claimed durably (fsync'd) before
  ``execute``, so the UUID is as durable as the claim: after a crash, ``reconcile``
  recomputes it and asks the server by it; nothing else needs storing.
- **Goals are built declaratively** (``build_goal``): each goal field path gets a source
  (``$target.x``, ``$payload.dock``, ``$key``, …) or a constant, written into the
  generated goal message with the field's own type.
- **Outcomes** (``interpret``): what a finished goal means for the fleet: a result body
  (COMPLETED), ``ExecutionFailed`` (FAILED; a 4xx when the server refused before
  acting) or ``OutcomeUnknown`` (INTERRUPTED: the server does not know the goal, or it
  was canceled part-way).

Operates on the generated message objects by attribute, so it is tested here with them
and with plain stand-ins alike.
"""

from __future__ import annotations

import array
import json
import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

from fleet_idempotency.commands import MOVE_TO_WAYPOINT
from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.robots.backend import Command, ExecutionFailed, OutcomeUnknown
from fleet_idempotency.store import canonical_json

from .config import SOURCE_PREFIX, ActionMapping, Outcomes

# Fixed forever: changing it would change every goal UUID, and a restarted agent would
# ask its server for goals it never sent.
GOAL_ID_NAMESPACE = uuid.UUID("5f0c6a2e-3d1b-5c52-9a47-7f3e1b2d9c80")

# action_msgs/GoalStatus
STATUS_UNKNOWN, STATUS_ACCEPTED, STATUS_EXECUTING, STATUS_CANCELING = 0, 1, 2, 3
STATUS_SUCCEEDED, STATUS_CANCELED, STATUS_ABORTED = 4, 5, 6
STATUS_NAMES = {
    STATUS_UNKNOWN: "unknown",
    STATUS_ACCEPTED: "accepted",
    STATUS_EXECUTING: "executing",
    STATUS_CANCELING: "canceling",
    STATUS_SUCCEEDED: "succeeded",
    STATUS_CANCELED: "canceled",
    STATUS_ABORTED: "aborted",
}
TERMINAL_STATUSES = frozenset({STATUS_SUCCEEDED, STATUS_CANCELED, STATUS_ABORTED})

# Sources a goal field may name, beyond "payload.<field>".
FIXED_SOURCES = frozenset(
    {"key", "goal_id", "robot_id", "command_type", "payload_json", "frame_id"}
)
TARGET_SOURCES = frozenset({"target.x", "target.y", "target.theta", "target.qz", "target.qw"})
SOURCE_PATTERN = r"^(payload\.[a-z][a-z0-9_]*|[a-z][a-z0-9_.]*)$"


class GoalError(ValueError):
    """A goal that cannot be built for this command (a source it lacks, a field the
    action type does not have): refused before anything is sent."""


class TargetUnknown(ValueError):
    """A named target (waypoint, dock) the layout does not have."""


def goal_uuid(robot_id: str, key: str) -> uuid.UUID:
    """The goal UUID of ``key`` on ``robot_id``: the same for every delivery and restart."""
    return uuid.uuid5(GOAL_ID_NAMESPACE, f"{robot_id}\n{key}")


@dataclass(frozen=True)
class Target:
    x: float
    y: float
    theta: float = 0.0


def resolve_target(command: Command, layout: WorldConfig | None) -> Target | None:
    """Where a command goes, if it names a place: a move's waypoint (from the fleet
    file's layout) or coordinates; a dock's position when the layout has it."""
    payload = command.payload
    if command.command_type == MOVE_TO_WAYPOINT:
        waypoint = getattr(payload, "waypoint", None)
        if waypoint is None:
            return Target(float(getattr(payload, "x", 0.0)), float(getattr(payload, "y", 0.0)))
        points = layout.waypoints if layout is not None else {}
        if waypoint not in points:
            known = ", ".join(sorted(points)) or "none: no fleet_file"
            raise TargetUnknown(f"unknown waypoint {waypoint!r} (known: {known})")
        point = points[waypoint]
        return Target(point.x, point.y)
    dock = getattr(payload, "dock", None)
    if dock is not None and layout is not None and dock in layout.docks:
        point = layout.docks[dock]
        return Target(point.x, point.y)
    return None


def command_sources(
    command: Command, *, goal_id: uuid.UUID, frame_id: str, target: Target | None
) -> dict[str, Any]:
    """Every value a goal field may take from this command."""
    payload = command.payload.model_dump(exclude_none=True)
    sources: dict[str, Any] = {
        "key": command.key,
        "goal_id": str(goal_id),
        "robot_id": command.robot_id,
        "command_type": command.command_type,
        "payload_json": canonical_json(payload),
        "frame_id": frame_id,
    }
    for name, value in payload.items():
        sources[f"payload.{name}"] = value
    if target is not None:
        sources.update(
            {
                "target.x": target.x,
                "target.y": target.y,
                "target.theta": target.theta,
                "target.qz": math.sin(target.theta / 2.0),
                "target.qw": math.cos(target.theta / 2.0),
            }
        )
    return sources


def source_name(value: Any) -> str | None:
    """The source a goal value names ("$target.x" -> "target.x"), or None for a constant."""
    if isinstance(value, str) and value.startswith(SOURCE_PREFIX):
        if value.startswith(SOURCE_PREFIX * 2):
            return None
        return value[len(SOURCE_PREFIX) :]
    return None


def _constant(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(SOURCE_PREFIX * 2):
        return value[1:]
    return value


def check_mapping(command_type: str, mapping: ActionMapping, goal: Any, result: Any) -> None:
    """At start-up: every goal field exists on the action's Goal and is a scalar, every
    source is one a command can give, every result path exists. Raises ValueError."""
    where = f"actions.{command_type} ({mapping.action_type})"
    for path, value in mapping.goal.items():
        try:
            _scalar_slot(goal, path)
        except GoalError as error:
            raise ValueError(f"{where}: goal field {path!r}: {error}") from None
        name = source_name(value)
        if name is None:
            continue
        if not re.fullmatch(SOURCE_PATTERN, name) or not (
            name in FIXED_SOURCES or name in TARGET_SOURCES or name.startswith("payload.")
        ):
            raise ValueError(
                f"{where}: goal field {path!r}: unknown source ${name} (sources: "
                f"{', '.join('$' + s for s in sorted(FIXED_SOURCES | TARGET_SOURCES))}, "
                "$payload.<field>)"
            )
    outcomes = mapping.outcomes
    paths = [*mapping.result_fields]
    # Not error_message_field: optional, as some releases of an action lack it.
    paths += [p for p in (outcomes.error_code_field, outcomes.success_field) if p]
    for path in paths:
        try:
            get_field(result, path)
        except GoalError as error:
            raise ValueError(f"{where}: result field {path!r}: {error}") from None


def build_goal(goal: Any, mapping: ActionMapping, sources: dict[str, Any]) -> Any:
    """Fill ``goal`` (the action's Goal message) from ``sources``; GoalError if a source
    is missing for this command or a value does not fit its field."""
    for path, value in mapping.goal.items():
        name = source_name(value)
        if name is None:
            resolved = _constant(value)
        elif name in sources:
            resolved = sources[name]
        else:
            raise GoalError(
                f"goal field {path!r} takes ${name}, which a {sources['command_type']} "
                "command does not give"
            )
        set_field(goal, path, resolved)
    return goal


def _scalar_slot(obj: Any, path: str) -> tuple[Any, str, Any]:
    parts = path.split(".")
    for part in parts[:-1]:
        if not hasattr(obj, part):
            raise GoalError(f"no field {part!r} in {type(obj).__name__}")
        obj = getattr(obj, part)
    last = parts[-1]
    if not hasattr(obj, last):
        raise GoalError(f"no field {last!r} in {type(obj).__name__}")
    current = getattr(obj, last)
    if not isinstance(current, bool | int | float | str):
        raise GoalError(f"{type(current).__name__} is not a scalar field")
    return obj, last, current


def set_field(obj: Any, path: str, value: Any) -> None:
    """Set a scalar field by path, converted to the field's type (an int for a float64,
    a number for a string field); GoalError if it cannot be."""
    owner, name, current = _scalar_slot(obj, path)
    try:
        if isinstance(current, bool):
            if not isinstance(value, bool):
                raise TypeError(f"expected true or false, got {value!r}")
            converted: Any = value
        elif isinstance(current, int):
            if isinstance(value, bool) or not float(value).is_integer():
                raise TypeError(f"expected an integer, got {value!r}")
            converted = int(value)
        elif isinstance(current, float):
            if isinstance(value, bool):
                raise TypeError(f"expected a number, got {value!r}")
            converted = float(value)
        else:
            converted = value if isinstance(value, str) else json.dumps(value)
        setattr(owner, name, converted)
    except (TypeError, ValueError, AssertionError) as error:
        raise GoalError(f"goal field {path!r}: {error}") from None


def get_field(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not hasattr(obj, part):
            raise GoalError(f"no field {part!r} in {type(obj).__name__}")
        obj = getattr(obj, part)
    return obj


def to_json(value: Any) -> Any:
    """A message field as JSON: scalars as they are, arrays as lists, messages as objects."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple | array.array):
        return [to_json(item) for item in value]
    fields = getattr(value, "get_fields_and_field_types", None)
    if callable(fields):
        return {name: to_json(getattr(value, name)) for name in fields()}
    if hasattr(value, "tolist"):  # numpy arrays of fixed-size fields
        return to_json(value.tolist())
    return str(value)


def describe_code(outcomes: Outcomes, code: int) -> str:
    name = outcomes.error_codes.get(code)
    return f"error {code} ({name})" if name else f"error {code}"


def interpret(
    status: int, result: Any, mapping: ActionMapping, *, action_name: str, goal_id: uuid.UUID
) -> dict[str, Any]:
    """The fleet outcome of a goal that ended with ``status`` and ``result``: the result
    body, or ``ExecutionFailed`` / ``OutcomeUnknown``."""
    outcomes = mapping.outcomes
    if status == STATUS_UNKNOWN:
        raise OutcomeUnknown(
            f"{action_name} does not know goal {goal_id} (it never received it, restarted, "
            "or forgot it after its result timeout); it is not sent again"
        )
    if status == STATUS_CANCELED:
        raise OutcomeUnknown(
            f"{action_name} goal {goal_id} was canceled before it finished: the robot may "
            "have done part of it"
        )
    if status not in (STATUS_SUCCEEDED, STATUS_ABORTED):
        raise OutcomeUnknown(f"{action_name} goal {goal_id} ended in status {status}")
    code = _code(result, outcomes)
    text = _text(result, outcomes)
    succeeded = status == STATUS_SUCCEEDED
    if succeeded and outcomes.success_field is not None:
        succeeded = bool(get_field(result, outcomes.success_field))
    if succeeded and code is not None and code not in outcomes.ok_codes:
        succeeded = False
    if succeeded:
        return {
            "action": action_name,
            "goal_id": str(goal_id),
            "status": STATUS_NAMES[status],
            "result": {path: to_json(get_field(result, path)) for path in mapping.result_fields},
        }
    what = describe_code(outcomes, code) if code is not None else "no error code"
    detail = f": {text}" if text else ""
    if code is not None and code in outcomes.refused_codes:
        raise ExecutionFailed(
            f"{action_name} refused goal {goal_id} before acting, {what}{detail}; the key is "
            "spent (its goal was sent): submit again under a new key",
            outcomes.refused_status_code,
        )
    raise ExecutionFailed(
        f"{action_name} goal {goal_id} {STATUS_NAMES[status]}, {what}{detail}", 500
    )


def _code(result: Any, outcomes: Outcomes) -> int | None:
    if outcomes.error_code_field is None:
        return None
    value = get_field(result, outcomes.error_code_field)
    return int(value)


def _text(result: Any, outcomes: Outcomes) -> str:
    if outcomes.error_message_field is None:
        return ""
    try:
        return str(get_field(result, outcomes.error_message_field))
    except GoalError:
        return ""  # this release of the action has no such field
