"""Caller input, validated before it reaches a transaction.

Everything a caller can get wrong is checked here, outside the write transaction, so a
bad request is refused with a 400-like error that names the field and nothing is stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import StoreConfig
from .errors import InvalidRequest
from .fingerprint import fingerprint_of, parse_json, parse_json_object
from .keys import validate_key, validate_scope, validate_token
from .records import FINAL_STATES, IN_FLIGHT_STATES, Record, State

# Per-record bytes besides the payload (fingerprint, owner, times, index entries), used to
# estimate whether a claim still fits under the claim limit.
RECORD_OVERHEAD_BYTES = 400


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One claim of ``claim_many``; same fields as the keyword arguments of ``claim``."""

    scope: str
    key: str
    robot_id: str
    command_type: str
    payload_json: str
    initial_state: State = State.IN_PROGRESS
    retention_s: float | None = None


@dataclass(frozen=True, slots=True)
class ValidClaim:
    scope: str
    key: str
    robot_id: str
    command_type: str
    payload_json: str
    fingerprint: str
    initial_state: State
    retention_s: float

    @property
    def size_estimate(self) -> int:
        return len(self.payload_json.encode("utf-8")) + len(self.key) * 4 + RECORD_OVERHEAD_BYTES


def validate_claim(
    config: StoreConfig, request: ClaimRequest, *, stored: Record | None = None
) -> ValidClaim:
    """Validate ``request`` and compute its fingerprint.

    ``stored`` is the record already held under the request's key, if the caller read it.
    When the request repeats its robot, command type and payload string exactly, those
    inputs were validated when the record was claimed and the fingerprint, a pure function
    of them, is the stored one: the JSON parse, canonicalisation and hash are skipped. This
    is the common retry (the sender re-sends the same message) and the whole cost of a
    replay otherwise. Any difference, even key order, takes the full path.
    """
    scope = validate_scope(request.scope)
    key = validate_key(request.key)
    payload_json = request.payload_json
    fingerprint: str
    if (
        stored is not None
        and stored.payload_json == payload_json
        and stored.robot_id == request.robot_id
        and stored.command_type == request.command_type
        and isinstance(payload_json, str)
    ):
        robot_id, command_type, fingerprint = (
            stored.robot_id,
            stored.command_type,
            stored.fingerprint,
        )
        # The limit is configuration and may have been lowered since the record was stored.
        _check_payload_size(config, payload_json)
    else:
        robot_id = validate_token("robot_id", request.robot_id)
        command_type = validate_token("command_type", request.command_type)
        if not isinstance(payload_json, str):
            raise InvalidRequest(
                "payload_json", f"must be a string, got {type(payload_json).__name__}"
            )
        _check_payload_size(config, payload_json)
        payload = parse_json_object("payload_json", payload_json)
        fingerprint = fingerprint_of(robot_id, command_type, payload)
    initial_state = as_state(request.initial_state)
    if initial_state is None or initial_state not in IN_FLIGHT_STATES:
        raise InvalidRequest(
            "initial_state", f"must be ACCEPTED or IN_PROGRESS, got {request.initial_state!r}"
        )
    retention_s = request.retention_s
    if retention_s is None:
        retention_s = config.retention_for(command_type)
    elif isinstance(retention_s, bool) or not (
        isinstance(retention_s, int | float) and math.isfinite(retention_s) and retention_s > 0
    ):
        raise InvalidRequest(
            "retention_s", f"must be a positive number of seconds, got {retention_s!r}"
        )
    return ValidClaim(
        scope=scope,
        key=key,
        robot_id=robot_id,
        command_type=command_type,
        payload_json=payload_json,
        fingerprint=fingerprint,
        initial_state=initial_state,
        retention_s=float(retention_s),
    )


def _check_payload_size(config: StoreConfig, payload_json: str) -> None:
    size = len(payload_json.encode("utf-8"))
    if size > config.max_payload_bytes:
        raise InvalidRequest(
            "payload_json",
            f"is {size} bytes, the limit is {config.max_payload_bytes} bytes "
            "(payloads are refused, never truncated)",
        )


def as_state(value: object) -> State | None:
    """The State for an enum member or its integer value (ROS messages carry uint8)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    try:
        return State(value)
    except ValueError:
        return None


def validate_final_state(state: object) -> State:
    final = as_state(state)
    if final is None or final not in FINAL_STATES:
        raise InvalidRequest("state", f"must be COMPLETED, FAILED or INTERRUPTED, got {state!r}")
    return final


def validate_status_code(status_code: object) -> int:
    if isinstance(status_code, bool) or not isinstance(status_code, int):
        raise InvalidRequest("status_code", f"must be an integer, got {status_code!r}")
    if not 100 <= status_code <= 599:
        raise InvalidRequest(
            "status_code", f"must be an HTTP-like code 100..599, got {status_code}"
        )
    return status_code


def validate_result(config: StoreConfig, result_json: object) -> str:
    if not isinstance(result_json, str):
        raise InvalidRequest("result_json", f"must be a string, got {type(result_json).__name__}")
    size = len(result_json.encode("utf-8"))
    if size > config.max_result_bytes:
        raise InvalidRequest(
            "result_json",
            f"is {size} bytes, the limit is {config.max_result_bytes} bytes "
            "(results are refused, never truncated)",
        )
    parse_json("result_json", result_json)
    return result_json
