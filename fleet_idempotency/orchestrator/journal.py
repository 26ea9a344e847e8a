"""The orchestrator's side of the event log: build each fact's event and append it.

Every event of a command carries the command's claim id in its discriminator, so a key
released and claimed again keeps both lives in the log, while re-appending the same fact
is a no-op (the log deduplicates by identity).

Most events are *deferred*: queued in order and appended by the next ``flush`` in one
durable commit, off the path of the submit or result that caused them. That is safe
because the key store, not the log, is the truth about keys and is written first: after a
crash, ``OrchestratorCore.restore`` appends what the log is missing (an ACCEPTED for a
claim, a RESULT for a finish), and a lost DISPATCHED only means a re-send the robot
answers from its store. Events whose loss restore could not repair (a key released after
a robot's refusal) are appended at once with ``emit``, after everything deferred before
them, so the log's order is always the order things happened. A batch the log could not
take (its database down) stays queued, ahead of what comes next, for the next flush.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from fleet_idempotency.events import EventLog, EventLogUnavailable, EventType, FleetEventRecord
from fleet_idempotency.store import Record

from .dispatch import PendingCommand

# Events kept for a log that cannot be reached; the oldest beyond are dropped (counted in
# the "events_dropped" counter). About 1000 s of a busy fleet's events.
MAX_PENDING_EVENTS = 100_000


def accepted_detail(command: PendingCommand) -> dict[str, Any]:
    return {
        "robot_key": command.robot_key,
        "command_type": command.command_type,
        "payload_json": command.payload_json,
        "fingerprint": command.fingerprint,
    }


def result_detail(record: Record) -> dict[str, Any]:
    return {
        "state": int(record.state),
        "status_code": record.status_code,
        "result_json": record.result_json,
    }


def settled_detail(record: Record, *, answered_attempt: int, attempts: int) -> dict[str, Any]:
    """A result's detail with which send was answered, of how many: an answer to an
    earlier one than the last means the re-sends after it were needless (late, not lost)."""
    return result_detail(record) | {"answered_attempt": answered_attempt, "attempts": attempts}


def needless_sends(detail: Mapping[str, Any]) -> int:
    """How many sends came after the one a result (``settled_detail``) answered."""
    return max(0, int(detail.get("attempts", 0)) - int(detail.get("answered_attempt", 0)))


class Journal:
    def __init__(
        self,
        events: EventLog,
        *,
        on_appended: Callable[[list[FleetEventRecord]], None],
        wall_clock: Callable[[], float] = time.time,
        counters: Counter[str] | None = None,
    ) -> None:
        self.events = events
        self._on_appended = on_appended
        self._wall_clock = wall_clock
        self._pending: list[FleetEventRecord] = []
        self._pending_lock = threading.Lock()
        # "events_dropped": deferred events given up while the log was unreachable.
        self._counters = Counter[str]() if counters is None else counters
        # Held across take-and-append, so batches reach the log in the order they formed.
        self._append_lock = threading.Lock()

    def event(
        self,
        kind: EventType,
        command: PendingCommand,
        detail: dict[str, Any],
        discriminator: str = "",
    ) -> FleetEventRecord:
        return FleetEventRecord(
            event_type=kind,
            client_id=command.client_id,
            key=command.key,
            robot_id=command.robot_id,
            detail=detail,
            stamp=self._wall_clock(),
            discriminator=f"{command.claim_id}/{discriminator}",
        )

    def append(
        self,
        kind: EventType,
        command: PendingCommand,
        detail: dict[str, Any],
        discriminator: str = "",
    ) -> None:
        """Deferred: appended by the next ``flush``."""
        self.defer([self.event(kind, command, detail, discriminator)])

    def append_fact(
        self,
        kind: EventType,
        *,
        client_id: str,
        key: str,
        robot_id: str,
        detail: dict[str, Any],
        discriminator: str,
    ) -> None:
        """An event about a request that is not (or no longer) a pending command (deferred)."""
        self.defer(
            [
                FleetEventRecord(
                    event_type=kind,
                    client_id=client_id,
                    key=key,
                    robot_id=robot_id,
                    detail=detail,
                    stamp=self._wall_clock(),
                    discriminator=discriminator,
                )
            ]
        )

    def defer(self, events: list[FleetEventRecord]) -> None:
        with self._pending_lock:
            self._pending.extend(events)

    def flush(self) -> None:
        """Append everything deferred so far in one durable commit, then publish it."""
        self.emit([])

    def emit(self, events: list[FleetEventRecord]) -> None:
        """Append what is deferred and then ``events`` in one durable commit; hand what
        was new to ``on_appended``, in one call (the node publishes it as one batch)."""
        with self._append_lock:
            with self._pending_lock:
                batch, self._pending = [*self._pending, *events], []
            if not batch:
                return
            try:
                stored_batch = self.events.append_many(batch)
            except EventLogUnavailable:
                # Kept for the next flush (identities make a commit that did land before
                # the connection broke a no-op), within a bound: a log down for hours
                # must not grow this process without limit.
                with self._pending_lock:
                    self._pending[:0] = batch
                    excess = len(self._pending) - MAX_PENDING_EVENTS
                    if excess > 0:
                        del self._pending[:excess]
                        self._counters["events_dropped"] += excess
                raise
            appended = [stored for stored, new in stored_batch if new]
            if appended:
                self._on_appended(appended)
