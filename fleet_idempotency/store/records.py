"""What the store keeps per key: a full record while retained, a tombstone afterwards."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class State(IntEnum):
    """Lifecycle of a key. Values are the STATE_* constants of msg/CommandResult.msg."""

    UNKNOWN = 0
    ACCEPTED = 1
    IN_PROGRESS = 2
    COMPLETED = 3
    FAILED = 4
    INTERRUPTED = 5
    REJECTED = 6
    EXPIRED = 7

    @property
    def is_final(self) -> bool:
        """A final record is immutable: it is replayed, never re-run."""
        return self in _FINAL_STATES

    @property
    def is_in_flight(self) -> bool:
        """Claimed and not final: a duplicate is answered "in progress"."""
        return self in _IN_FLIGHT_STATES


_FINAL_STATES = frozenset({State.COMPLETED, State.FAILED, State.INTERRUPTED})
_IN_FLIGHT_STATES = frozenset({State.ACCEPTED, State.IN_PROGRESS})
FINAL_STATES = _FINAL_STATES
IN_FLIGHT_STATES = _IN_FLIGHT_STATES


@dataclass(frozen=True, slots=True)
class Record:
    """One claimed key and, once final, its cached result."""

    scope: str
    key: str
    fingerprint: str
    state: State
    status_code: int
    result_json: str
    robot_id: str
    command_type: str
    # Kept so that a resumed command can be re-run by a process that never saw the request.
    payload_json: str
    owner: str
    created_at: float
    updated_at: float
    expires_at: float
    # Kept so that finish() can restart the window from completion with the same length.
    retention_s: float
    # 1 on the first claim, +1 each time recovery hands the record to a new owner.
    attempt: int = 1

    def replace(self, **changes: Any) -> Record:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["state"] = self.state.name
        return data


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What remains of a final record after its retention window.

    Small on purpose (no payload, no result body): it only has to answer a reused key with
    "expired — use the status check" for much longer than full records are kept.
    """

    scope: str
    key: str
    fingerprint: str
    state: State
    status_code: int
    command_type: str
    expired_at: float
    tombstone_expires_at: float

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["state"] = self.state.name
        return data

    @classmethod
    def of_record(cls, record: Record, *, expired_at: float, keep_for_s: float) -> Tombstone:
        return cls(
            scope=record.scope,
            key=record.key,
            fingerprint=record.fingerprint,
            state=record.state,
            status_code=record.status_code,
            command_type=record.command_type,
            expired_at=expired_at,
            tombstone_expires_at=expired_at + keep_for_s,
        )
