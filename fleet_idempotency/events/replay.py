"""Fleet state rebuilt from events: a pure, deterministic fold.

The orchestrator rebuilds its queue and in-flight set from ``replay(log.read())`` after a
restart, and may keep a live ``FleetState`` by ``apply``-ing each event it appends; both
paths run the same code, so "replay equals the live state" holds by construction.

Transitions act on the key's current state:

- ACCEPTED starts a key (again, after REJECTED or EXPIRED: the key was released);
- DISPATCHED/RETRIED/BUSY/RESULT/INTERRUPTED/REJECTED act only on a key in flight
  (ACCEPTED or IN_PROGRESS): a late result or a stray retry never reopens a final key;
- EXPIRED acts on any started key: a final one whose retention ended (the store keeps a
  tombstone), or one in flight that the robot answered "expired" (the key was released);
- everything else, and any event for a key never accepted, is counted only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..store import INTERRUPTED_STATUS_CODE, State
from .model import EventLogError, EventType, FleetEventRecord

KeyId = tuple[str, str]
_STATE_VALUES = frozenset(int(state) for state in State)


@dataclass(frozen=True)
class KeyView:
    """The orchestrator's view of one (client, key), as the events describe it."""

    client_id: str
    key: str
    robot_id: str
    command_type: str
    # The key the command carries on the robot (the robot's scope differs from the client's).
    robot_key: str
    payload_json: str
    state: State
    status_code: int
    result_json: str
    # Highest attempt number dispatched; a resumed dispatch continues from attempts + 1.
    attempts: int
    # Sequence of the last event that changed this view.
    last_sequence: int


@dataclass
class FleetState:
    # Ordered by each key's latest ACCEPTED event: in_flight() is the queue in FIFO order.
    keys: dict[KeyId, KeyView] = field(default_factory=dict)
    # Events per event type value, including those that changed nothing.
    counts: dict[str, int] = field(default_factory=dict)
    last_sequence: int = 0
    # Events naming a key that no ACCEPTED event started (counted, not applied).
    orphan_events: int = 0

    def apply(self, event: FleetEventRecord) -> None:
        """Fold one event in; events must come in sequence order."""
        if event.sequence and event.sequence <= self.last_sequence:
            raise EventLogError(
                f"event {event.sequence} applied after event {self.last_sequence}: "
                "replay needs events in sequence order"
            )
        self.last_sequence = max(self.last_sequence, event.sequence)
        name = event.event_type.value
        self.counts[name] = self.counts.get(name, 0) + 1
        key_id = (event.client_id, event.key)
        current = self.keys.get(key_id)
        if current is None and event.event_type is not EventType.ACCEPTED:
            if event.key:  # robot-level events carry no key: they are not orphans
                self.orphan_events += 1
            return
        updated = _transition(current, event)
        if updated is None:
            return
        if current is not None:
            del self.keys[key_id]  # re-inserted last: a key accepted again re-queues at the end
        self.keys[key_id] = replace(updated, last_sequence=event.sequence)

    def in_flight(self) -> list[KeyView]:
        """Keys accepted and not final (ACCEPTED or IN_PROGRESS), oldest acceptance first."""
        return [view for view in self.keys.values() if view.state.is_in_flight]

    def final(self) -> list[KeyView]:
        """Keys with a final result (COMPLETED, FAILED, INTERRUPTED)."""
        return [view for view in self.keys.values() if view.state.is_final]

    def summary(self) -> dict[str, Any]:
        """JSON-able counts: keys per state and events per type (zeros included)."""
        per_state = {state.name.lower(): 0 for state in State}
        for view in self.keys.values():
            per_state[view.state.name.lower()] += 1
        return {
            "last_sequence": self.last_sequence,
            "keys": len(self.keys),
            "in_flight": sum(1 for view in self.keys.values() if view.state.is_in_flight),
            "states": per_state,
            "events": {kind.value: self.counts.get(kind.value, 0) for kind in EventType},
            "orphan_events": self.orphan_events,
        }


def replay(events: Iterable[FleetEventRecord]) -> FleetState:
    """Fold events (in sequence order) into the fleet state they describe."""
    state = FleetState()
    for event in events:
        state.apply(event)
    return state


# -- transitions ---------------------------------------------------------------------------
# Each returns the new view, or None when the event changes nothing. Detail fields are read
# defensively: one malformed event must not stop an orchestrator from restarting.


def _text(detail: dict[str, Any], name: str, default: str = "") -> str:
    value = detail.get(name)
    return value if isinstance(value, str) else default


def _integer(detail: dict[str, Any], name: str) -> int | None:
    value = detail.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _accepted(current: KeyView | None, event: FleetEventRecord) -> KeyView | None:
    if current is not None and current.state not in (State.REJECTED, State.EXPIRED):
        return None  # already live: a second ACCEPTED must not reset attempts or results
    return KeyView(
        client_id=event.client_id,
        key=event.key,
        robot_id=event.robot_id,
        command_type=_text(event.detail, "command_type"),
        robot_key=_text(event.detail, "robot_key", event.key),
        payload_json=_text(event.detail, "payload_json"),
        state=State.ACCEPTED,
        status_code=0,
        result_json="",
        attempts=0,
        last_sequence=event.sequence,
    )


def _dispatched(view: KeyView, event: FleetEventRecord) -> KeyView:
    attempt = _integer(event.detail, "attempt") or 0
    return replace(view, state=State.IN_PROGRESS, attempts=max(view.attempts, attempt))


def _busy(view: KeyView, event: FleetEventRecord) -> KeyView:
    return replace(view, state=State.ACCEPTED)


def _state(detail: dict[str, Any]) -> State | None:
    value = _integer(detail, "state")
    return None if value is None or value not in _STATE_VALUES else State(value)


def _result(view: KeyView, event: FleetEventRecord) -> KeyView | None:
    state = _state(event.detail)
    if state is None or not state.is_final:
        return None  # e.g. an "in progress" answer: the key is still in flight
    return replace(
        view,
        state=state,
        status_code=_integer(event.detail, "status_code") or 0,
        result_json=_text(event.detail, "result_json"),
    )


def _interrupted(view: KeyView, event: FleetEventRecord) -> KeyView:
    return replace(
        view,
        state=State.INTERRUPTED,
        status_code=_integer(event.detail, "status_code") or INTERRUPTED_STATUS_CODE,
        result_json=_text(event.detail, "result_json", view.result_json),
    )


def _rejected(view: KeyView, event: FleetEventRecord) -> KeyView:
    status_code = _integer(event.detail, "status_code")
    return replace(
        view,
        state=State.REJECTED,
        status_code=view.status_code if status_code is None else status_code,
        result_json=_text(event.detail, "result_json", view.result_json),
    )


def _expired(view: KeyView, event: FleetEventRecord) -> KeyView:
    # A final key keeps its cached code when the detail has none: the state now says
    # EXPIRED, the code still tells an operator how the command ended.
    status_code = _integer(event.detail, "status_code")
    return replace(
        view,
        state=State.EXPIRED,
        status_code=view.status_code if status_code is None else status_code,
    )


_IN_FLIGHT_TRANSITIONS: dict[EventType, Callable[[KeyView, FleetEventRecord], KeyView | None]] = {
    EventType.DISPATCHED: _dispatched,
    EventType.RETRIED: _dispatched,
    EventType.BUSY: _busy,
    EventType.RESULT: _result,
    EventType.INTERRUPTED: _interrupted,
    EventType.REJECTED: _rejected,
}


def _transition(current: KeyView | None, event: FleetEventRecord) -> KeyView | None:
    if event.event_type is EventType.ACCEPTED:
        return _accepted(current, event)
    if current is None:
        return None
    if event.event_type is EventType.EXPIRED:
        return _expired(current, event)
    apply = _IN_FLIGHT_TRANSITIONS.get(event.event_type)
    if apply is None or not current.state.is_in_flight:
        return None
    return apply(current, event)
