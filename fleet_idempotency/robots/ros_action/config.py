"""The ``ros_action`` backend's parameters: per command type, which action to call and how.

Everything a robot integrator configures is declarative and validated here (pydantic, no
ROS): the action's name and type (``pkg/action/Type``, loaded when the agent starts), the
goal built from the command (a field path -> a source or a constant), and how the
action's outcome maps to the fleet's: COMPLETED, FAILED, or refused (FAILED with a 4xx:
the server says nothing was done, but the goal was sent, so the key is spent).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleet_idempotency.commands import COMMAND_TYPES

ACTION_TYPE_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*/action/[A-Za-z][A-Za-z0-9_]*$"
FIELD_PATH_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$"
# A goal value that starts with this names a source (goals.py, SOURCES); anything else
# is a constant. "$$" at the start escapes a literal "$".
SOURCE_PREFIX = "$"

ShutdownPolicy = Literal["policy", "cancel", "leave"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Outcomes(_Model):
    """How a finished goal maps to the fleet's outcome.

    A goal that ended SUCCEEDED is COMPLETED unless ``success_field`` (a bool of the
    result) is false or ``error_code_field`` holds a code outside ``ok_codes``. ABORTED
    is FAILED (500). A code in ``refused_codes`` means the server refused before acting:
    FAILED with ``refused_status_code`` (a 4xx), final like any failure, because the goal
    was sent and is never sent again under this key. ``error_codes`` name the codes in
    messages; ``error_message_field`` is the result's own text, added to them.
    """

    error_code_field: str | None = Field(default=None, pattern=FIELD_PATH_PATTERN)
    ok_codes: frozenset[int] = frozenset({0})
    success_field: str | None = Field(default=None, pattern=FIELD_PATH_PATTERN)
    error_message_field: str | None = Field(default=None, pattern=FIELD_PATH_PATTERN)
    error_codes: dict[int, str] = Field(default_factory=dict)
    refused_codes: frozenset[int] = frozenset()
    refused_status_code: int = Field(default=400, ge=400, le=499)


class ActionMapping(_Model):
    """One command type's action."""

    # Relative names are resolved in the backend's ``namespace``.
    action_name: str = Field(pattern=r"^/?[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*$")
    action_type: str = Field(pattern=ACTION_TYPE_PATTERN)
    # Goal field path -> "$source" (goals.py) or a constant (str, number, bool).
    goal: dict[str, Any] = Field(default_factory=dict)
    outcomes: Outcomes = Field(default_factory=Outcomes)
    # Result fields copied into the command's result body, by path.
    result_fields: list[str] = Field(default_factory=list)
    # When the agent shuts down mid-goal: cancel it, leave it running (the next start
    # reconciles it by its UUID), or "policy": the agent's recovery policy of the command
    # type (resume: leave it, interrupt: cancel it).
    on_shutdown: ShutdownPolicy = "policy"
    # No result this long after the goal was accepted: cancel it, INTERRUPTED (None: wait).
    timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @field_validator("goal")
    @classmethod
    def _goal_paths(cls, goal: dict[str, Any]) -> dict[str, Any]:
        for path, value in goal.items():
            if not re.fullmatch(FIELD_PATH_PATTERN, path):
                raise ValueError(f"goal field {path!r} is not a field path such as pose.pose.x")
            if not isinstance(value, str | int | float | bool):
                raise ValueError(f"goal field {path!r}: a source ('$name') or a scalar constant")
        return goal

    @field_validator("result_fields")
    @classmethod
    def _result_paths(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not re.fullmatch(FIELD_PATH_PATTERN, path):
                raise ValueError(f"result field {path!r} is not a field path")
        return paths


class RosActionParams(_Model):
    """Parameters of the ``ros_action`` backend (``backend_params.<field>``)."""

    # Command type -> its action. Structured: a JSON string as a ROS parameter.
    actions: dict[str, ActionMapping] = Field(min_length=1)
    # Where relative action names live, e.g. "/robot1" for a namespaced Nav2.
    namespace: str = Field(default="", pattern=r"^(/[A-Za-z][A-Za-z0-9_]*)*$")
    # The fleet file whose waypoints ``move_to_waypoint {"waypoint": …}`` goes to (empty:
    # only {"x", "y"} targets), and the frame its coordinates are in.
    fleet_file: str = ""
    frame_id: str = Field(default="map", min_length=1)
    # A goal whose acceptance does not come in this long may or may not have reached the
    # server: it is asked for by its UUID, never sent again.
    accept_timeout_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    # While waiting for a result, asked for again this often (and at once when a new
    # server process appears): a restarted server answers "unknown".
    result_poll_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    # How long a cancel at shutdown waits for the server's answer.
    cancel_timeout_s: float = Field(default=1.0, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _command_types(self) -> RosActionParams:
        unknown = sorted(set(self.actions) - set(COMMAND_TYPES))
        if unknown:
            raise ValueError(
                f"actions for unknown command types {unknown} (known: {', '.join(COMMAND_TYPES)})"
            )
        return self

    def resolved_name(self, mapping: ActionMapping) -> str:
        if mapping.action_name.startswith("/"):
            return mapping.action_name
        return f"{self.namespace}/{mapping.action_name}"
