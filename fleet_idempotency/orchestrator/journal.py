"""The orchestrator's side of the event log: build each fact's event and append it.

Every event of a command carries the command's claim id in its discriminator, so a key
released and claimed again keeps both lives in the log, while re-appending the same fact
is a no-op (the log deduplicates by identity).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fleet_idempotency.events import EventLog, EventType, FleetEventRecord
from fleet_idempotency.store import Record

from .dispatch import PendingCommand


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


class Journal:
    def __init__(
        self,
        events: EventLog,
        *,
        on_event: Callable[[FleetEventRecord], None],
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.events = events
        self._on_event = on_event
        self._wall_clock = wall_clock

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
        self.emit([self.event(kind, command, detail, discriminator)])

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
        """An event about a request that is not (or no longer) a pending command."""
        self.emit(
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

    def emit(self, events: list[FleetEventRecord]) -> None:
        """Append in one durable commit, then publish what was new."""
        if not events:
            return
        for stored, appended in self.events.append_many(events):
            if appended:
                self._on_event(stored)
