"""Transport-neutral forms of the fleet messages, so the logic is testable without ROS.

``Delivery`` is a FleetCommand as received, ``Answer`` a CommandResult to publish; the
nodes convert to and from the generated ROS types in ``ros_convert``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Final

from fleet_idempotency.store import (
    Claimed,
    ClaimOutcome,
    Expired,
    InProgress,
    Mismatch,
    Record,
    Replay,
    State,
    Tombstone,
)

OK = 200
ACCEPTED = 202
BAD_REQUEST = 400
CONFLICT = 409
GONE = 410
MISMATCH = 422
BUSY = 429
INTERNAL = 500
UNAVAILABLE = 503
STORE_FULL = 507
# A command withdrawn by its client before it was sent to its robot (an ExecuteCommand
# goal canceled in time): nothing ran, the key was released. nginx's "client closed
# request"; no HTTP request ends with it (the HTTP API has no cancel).
WITHDRAWN = 499
# How a node process says "I cannot start, and waiting will not help" (a bad parameter,
# an unreadable store, an unknown backend), after one clear line on stderr: supervisors
# do not restart it, since it would fail the same way again.
EXIT_STARTUP_ERROR: Final = 1
# A robot's refusals that a later re-send of the same command may pass: full queue (429),
# full store (507), backend not ready yet (503). The orchestrator holds the command and
# pauses the robot's lane instead of failing it.
RETRY_LATER: Final = frozenset({BUSY, STORE_FULL, UNAVAILABLE})


@dataclass(frozen=True)
class Delivery:
    """One delivery of a command to a robot (a retry is another delivery, same key)."""

    key: str
    client_id: str
    robot_id: str
    command_type: str
    payload_json: str
    payload_sha256: str = ""
    attempt: int = 1
    # The orchestrator's HMAC over the command (auth/signing.py); empty when unsigned.
    auth_key_id: str = ""
    auth_tag: str = ""
    # The sending replica's lease token on this robot (0: no lease, a lone orchestrator).
    fencing_token: int = 0


@dataclass(frozen=True)
class Answer:
    """What a robot (or the orchestrator) answers about one key."""

    key: str
    client_id: str
    robot_id: str
    command_type: str
    state: State
    status_code: int
    replayed: bool = False
    result_json: str = ""
    message: str = ""
    payload_sha256: str = ""
    attempt: int = 0

    @classmethod
    def to(cls, delivery: Delivery, **fields: Any) -> Answer:
        """An answer addressed to the sender of ``delivery``."""
        base = cls(
            key=delivery.key,
            client_id=delivery.client_id,
            robot_id=delivery.robot_id,
            command_type=delivery.command_type,
            state=State.UNKNOWN,
            status_code=0,
            attempt=delivery.attempt,
        )
        return replace(base, **fields)

    @classmethod
    def rejected(cls, delivery: Delivery, status_code: int, message: str) -> Answer:
        return cls.to(delivery, state=State.REJECTED, status_code=status_code, message=message)

    @property
    def is_final(self) -> bool:
        return self.state.is_final


def answer_for_outcome(delivery: Delivery, outcome: ClaimOutcome) -> Answer:
    """Translate a store claim outcome into the answer the sender gets."""
    match outcome:
        case Claimed(record=record):
            return Answer.to(
                delivery,
                state=State.ACCEPTED,
                status_code=ACCEPTED,
                payload_sha256=record.fingerprint,
                message="accepted",
            )
        case Replay(record=record):
            return Answer.to(
                delivery,
                state=record.state,
                status_code=record.status_code,
                replayed=True,
                result_json=record.result_json,
                payload_sha256=record.fingerprint,
                message=outcome.message if record.status_code >= BAD_REQUEST else "",
            )
        case InProgress(record=record):
            return Answer.to(
                delivery,
                state=record.state,
                status_code=CONFLICT,
                payload_sha256=record.fingerprint,
                message=outcome.message,
            )
        case Mismatch():
            return Answer.to(
                delivery,
                state=State.REJECTED,
                status_code=MISMATCH,
                payload_sha256=outcome.received_fingerprint,
                message=outcome.message,
            )
        case Expired(tombstone=tombstone):
            return Answer.to(
                delivery,
                state=State.EXPIRED,
                status_code=GONE,
                payload_sha256=tombstone.fingerprint,
                message=outcome.message,
            )
    raise AssertionError(f"unhandled claim outcome {outcome!r}")


def answer_for_record(record: Record, *, client_id: str = "", attempt: int = 0) -> Answer:
    """The final (or current) answer a stored record stands for."""
    return Answer(
        key=record.key,
        client_id=client_id,
        robot_id=record.robot_id,
        command_type=record.command_type,
        state=record.state,
        status_code=record.status_code,
        result_json=record.result_json,
        payload_sha256=record.fingerprint,
        attempt=attempt,
        message=_record_message(record),
    )


def _record_message(record: Record) -> str:
    if record.state == State.INTERRUPTED:
        return (
            f"key {record.key!r} interrupted: {_interruption_reason(record.result_json)}; it "
            "was not re-run and needs reconciliation"
        )
    if record.status_code >= BAD_REQUEST:
        return f"key {record.key!r} ended {record.state.name}"
    return ""


def _interruption_reason(result_json: str) -> str:
    """Why the outcome is unknown, as the backend or the crash recovery recorded it (a
    vehicle that restarted is not a process that died)."""
    try:
        reason = json.loads(result_json).get("message")
    except (ValueError, AttributeError):
        reason = None
    return reason if isinstance(reason, str) and reason else "the executing process died"


@dataclass(frozen=True)
class KeyStatus:
    """A status-check (CheckKey) answer, transport-neutral."""

    found: bool
    state: State
    status_code: int = 0
    robot_id: str = ""
    command_type: str = ""
    payload_sha256: str = ""
    result_json: str = ""
    message: str = ""
    created_at: float = 0.0
    expires_at: float = 0.0


def key_status(
    found: Record | Tombstone | None, key: str, *, expired_key_policy: str = "reject"
) -> KeyStatus:
    """Describe what the store knows of ``key`` for the status check."""
    if found is None:
        return KeyStatus(
            found=False,
            state=State.UNKNOWN,
            message=f"key {key!r} is unknown: never seen, released, or forgotten",
        )
    if isinstance(found, Tombstone):
        return KeyStatus(
            found=True,
            state=State.EXPIRED,
            status_code=found.status_code,
            command_type=found.command_type,
            payload_sha256=found.fingerprint,
            message=(
                f"key {key!r} expired at {found.expired_at:.0f} (epoch s) after ending "
                f"{found.state.name} with status {found.status_code}; its result body is no "
                "longer kept. "
                + (
                    "A retry with this key is refused, not re-run: use a new key for a new command"
                    if expired_key_policy == "reject"
                    else "A retry with this key is treated as a new command"
                )
            ),
            created_at=found.expired_at,
            expires_at=found.tombstone_expires_at,
        )
    return KeyStatus(
        found=True,
        state=found.state,
        status_code=found.status_code,
        robot_id=found.robot_id,
        command_type=found.command_type,
        payload_sha256=found.fingerprint,
        result_json=found.result_json,
        message=_record_message(found) or f"key {key!r} is {found.state.name}",
        created_at=found.created_at,
        expires_at=found.expires_at,
    )
