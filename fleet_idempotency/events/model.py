"""What the event log stores: event types, one immutable event, and the errors it raises."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# (client_id, key, event_type, discriminator): appending an identity already in the log
# appends nothing, so a retried or replayed append can never double an event.
Identity = tuple[str, str, str, str]


class EventLogError(Exception):
    """Base class of every error the event log raises on purpose."""


class EventLogCorrupted(EventLogError):
    """The directory holds something that is not a readable event log."""


class EventLogSchemaMismatch(EventLogError):
    """The log was written with a schema version this code does not read."""


class EventLogFull(EventLogError):
    """The log reached map_size_max; what is stored is intact, nothing was appended."""


class EventLogClosed(EventLogError):
    """The log was used after close()."""


class EventLogReadOnly(EventLogError):
    """An append on a log opened read-only (e.g. by the operator tool)."""


class EventLogUnavailable(EventLogError):
    """The log's database cannot be reached (down, restarting, network). Nothing is lost:
    the call may be repeated once it is back, and an append repeated after this error is
    deduplicated by identity if its first try did commit."""


class EventType(StrEnum):
    """Every state change the orchestrator records. Values are FleetEvent.event_type."""

    ACCEPTED = "accepted"
    DISPATCHED = "dispatched"
    RETRIED = "retried"
    DUPLICATE_SUPPRESSED = "duplicate_suppressed"
    MISMATCH_REJECTED = "mismatch_rejected"
    BUSY = "busy"
    RESULT = "result"
    INTERRUPTED = "interrupted"
    EXPIRED = "expired"
    # The robot refused before any side effect and the key was released: a later ACCEPTED
    # for the same key starts it afresh.
    REJECTED = "rejected"
    ROBOT_OFFLINE = "robot_offline"
    ROBOT_ONLINE = "robot_online"
    RESULT_IGNORED = "result_ignored"


def parse_event_type(value: object) -> EventType:
    if isinstance(value, str) and value in EventType.__members__.values():
        return EventType(value)
    known = ", ".join(t.value for t in EventType)
    raise EventLogError(f"unknown event type {value!r}; known: {known}")


@dataclass(frozen=True)
class FleetEventRecord:
    """One immutable event. ``sequence`` is 0 until the log assigns it on append.

    ``detail`` must be a JSON object of plain JSON values. Only its type is checked here;
    its contents are checked on append, because the dict stays mutable after construction.
    """

    event_type: EventType
    client_id: str
    key: str
    robot_id: str
    # Excluded from the hash: a dict is unhashable, and identity + sequence already
    # distinguish events.
    detail: dict[str, Any] = field(hash=False)
    stamp: float
    # Tells apart events that legitimately repeat for one key (attempt number of a
    # DISPATCHED/RETRIED, a counter of DUPLICATE_SUPPRESSED, ...).
    discriminator: str = ""
    sequence: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "event_type", parse_event_type(self.event_type))
        for name in ("client_id", "key", "robot_id", "discriminator"):
            if not isinstance(getattr(self, name), str):
                raise EventLogError(f"{name} must be a str, got {getattr(self, name)!r}")
        if not isinstance(self.detail, dict):
            raise EventLogError(
                f"detail must be a JSON object (dict), got {type(self.detail).__name__}"
            )
        if (
            isinstance(self.stamp, bool)
            or not isinstance(self.stamp, int | float)
            or not math.isfinite(self.stamp)
        ):
            raise EventLogError(f"stamp must be finite epoch seconds, got {self.stamp!r}")
        object.__setattr__(self, "stamp", float(self.stamp))
        if isinstance(self.sequence, bool) or not isinstance(self.sequence, int):
            raise EventLogError(f"sequence must be an int, got {self.sequence!r}")
        if self.sequence < 0:
            raise EventLogError(f"sequence must be >= 0, got {self.sequence}")

    @property
    def identity(self) -> Identity:
        return (self.client_id, self.key, self.event_type.value, self.discriminator)

    def to_dict(self) -> dict[str, Any]:
        """One JSON-lines export row; ``from_dict`` reads it back unchanged."""
        return {
            "sequence": self.sequence,
            "event_type": self.event_type.value,
            "client_id": self.client_id,
            "key": self.key,
            "robot_id": self.robot_id,
            "discriminator": self.discriminator,
            "stamp": self.stamp,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FleetEventRecord:
        try:
            return cls(
                event_type=data["event_type"],
                client_id=data["client_id"],
                key=data["key"],
                robot_id=data["robot_id"],
                detail=data["detail"],
                stamp=data["stamp"],
                discriminator=data.get("discriminator", ""),
                sequence=data.get("sequence", 0),
            )
        except KeyError as missing:
            raise EventLogError(f"event is missing the field {missing}") from None
        except TypeError as exc:  # e.g. data is not a dict
            raise EventLogError(f"not an event: {exc}") from None


def check_json_object(detail: object) -> None:
    """Refuse what JSON cannot hold exactly, naming where it is.

    Stricter than json.dumps on purpose: it silently turns tuples into lists and int keys
    into strings, so a stored event would no longer equal the one appended.
    """
    if not isinstance(detail, dict):
        raise EventLogError(f"detail must be a JSON object (dict), got {type(detail).__name__}")
    _check_json_value(detail, "detail")


def _check_json_value(value: object, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise EventLogError(f"{where} is {value}, which JSON cannot represent")
    if value is None or isinstance(value, str | int | float):
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_value(item, f"{where}[{index}]")
        return
    if isinstance(value, dict):
        for name, item in value.items():
            if not isinstance(name, str):
                raise EventLogError(f"{where} has the non-string key {name!r}")
            _check_json_value(item, f"{where}[{name!r}]")
        return
    raise EventLogError(
        f"{where} holds a {type(value).__name__}, which is not a JSON value "
        "(use dict, list, str, int, float, bool or None)"
    )
