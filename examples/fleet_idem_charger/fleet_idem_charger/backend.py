"""The charging station backend: ``dock`` switches one bay's charger on for ``charge_s``.

What a real backend has to get right, in small:

- ``prepare`` refuses what cannot be done *before* touching anything (an unknown bay),
  so the agent releases the key and a corrected retry may run;
- ``execute`` actuates once and reports what it did; anything raised from here on is
  final, because the charger may already be on;
- ``start`` does not block: the controller link comes up in the background and
  ``readiness`` says so until then (the agent refuses commands with 503 meanwhile);
- ``shutdown`` aborts a running ``execute`` at once (``ExecutionAborted``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fleet_idempotency.robots.backend import (
    BackendContext,
    Command,
    CommandRefused,
    ExecutionAborted,
    Pose,
    Readiness,
    RobotBackend,
)


class ChargerParams(BaseModel):
    # Unknown fields are refused: a typo in a fleet file is an error, not a default.
    model_config = ConfigDict(extra="forbid", frozen=True)

    bays: list[str] = Field(min_length=1)  # the dock names this station serves
    actuation_log: Path  # one JSON line per charger switched on (the "hardware")
    charge_s: float = Field(default=2.0, ge=0, allow_inf_nan=False)
    connect_s: float = Field(default=0.5, ge=0, allow_inf_nan=False)  # the link's set-up


class ChargingStation(RobotBackend):
    # A literal, so that an agent implementing another version refuses this class.
    interface_version = 1
    Params: ClassVar[type[BaseModel]] = ChargerParams
    robot_types: ClassVar[frozenset[str] | None] = frozenset({"charger"})

    def __init__(self, context: BackendContext, params: BaseModel) -> None:
        super().__init__(context, params)
        assert isinstance(params, ChargerParams)
        self.settings = params
        self._connected = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._connect, name="charger-link", daemon=True).start()

    def _connect(self) -> None:
        # A real station would open its field bus here; the example only takes its time.
        if not self._stop.wait(self.settings.connect_s):
            self.settings.actuation_log.parent.mkdir(parents=True, exist_ok=True)
            self._connected.set()
            self.context.logger.info(f"charger link up: bays {', '.join(self.settings.bays)}")
            self.context.on_ready_change()

    def readiness(self) -> Readiness:
        if self._connected.is_set():
            return Readiness(True)
        return Readiness(False, "the charging station's controller link")

    def supported_commands(self) -> frozenset[str]:
        return frozenset({"dock"})

    def prepare(self, command: Command) -> None:
        bay = getattr(command.payload, "dock", None)
        if bay not in self.settings.bays:
            raise CommandRefused(
                f"no bay {bay!r} at this station (bays: {', '.join(self.settings.bays)})"
            )

    def execute(self, command: Command) -> dict[str, Any]:
        bay = getattr(command.payload, "dock", "")
        switched_on = time.time()
        self._actuate({"key": command.key, "bay": bay, "on_at": switched_on})
        # Charging: abortable at any moment, as shutdown requires.
        if self._stop.wait(self.settings.charge_s):
            raise ExecutionAborted(f"charging at {bay} aborted by shutdown")
        return {"bay": bay, "charged_s": self.settings.charge_s, "switched_on_at": switched_on}

    def _actuate(self, entry: dict[str, Any]) -> None:
        with self._lock, self.settings.actuation_log.open("a") as log:
            log.write(json.dumps(entry) + "\n")
            log.flush()
            os.fsync(log.fileno())

    def pose(self) -> Pose:
        return self.context.start_pose  # a station does not move

    def shutdown(self) -> None:
        self._stop.set()


def actuations(log: Path, key: str) -> int:
    """How many times the charger was switched on for ``key`` (the test oracle)."""
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if json.loads(line)["key"] == key)
