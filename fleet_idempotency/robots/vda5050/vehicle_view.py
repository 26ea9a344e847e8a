"""The vehicle as master control sees it through the broker: its ``connection`` state,
``factsheet`` and latest ``state``; every message checked, bad ones counted and ignored.

A message is ignored (and counted under its reason) when it is too big, nested too
deep, not JSON, not an object, fails the schema of the fields we read, names another
manufacturer or serial number, or is stale: a ``state`` whose ``headerId`` is not above
the last one accepted. One exception: after the vehicle came ONLINE again, a lower
``headerId`` is a restarted vehicle counting from the start (headerId is per topic and
incremented with each message sent, 2.1 section 6.4); it is accepted and the vehicle's
``restarts`` count goes up, which tells the backend the vehicle may have forgotten its
order (nothing else in VDA 5050 says so).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from fleet_idempotency.vda5050.messages import Connection, Factsheet, State
from fleet_idempotency.vda5050.wire import BadMessage, decode


@dataclass(frozen=True)
class Snapshot:
    state: State | None
    state_sequence: int  # how many states were accepted (to wait for a newer one)
    restarts: int
    # ONLINE, OFFLINE, CONNECTIONBROKEN (3.0: CONNECTION_BROKEN), HIBERNATING, or "" (never
    # heard: the broker kept no retained ``connection`` for us)
    connection: str
    factsheet: Factsheet | None
    # No state yet since the vehicle last came ONLINE: the state held may be of a process
    # that has since restarted (and forgotten its order), so nothing may be sent on it.
    state_stale: bool = False
    factsheets: int = 0  # how many factsheets were accepted (to wait for a newer one)


class VehicleView:
    def __init__(
        self,
        *,
        manufacturer: str,
        serial_number: str,
        max_bytes: int,
        max_depth: int,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.manufacturer = manufacturer
        self.serial_number = serial_number
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.bad_input: Counter[str] = Counter()
        self.accepted: Counter[str] = Counter()
        self._on_change = on_change
        self._changed = threading.Condition()
        self._state: State | None = None
        self._state_sequence = 0
        self._restarts = 0
        self._online_since_state = False
        self._connection = ""
        self._connection_header = -1
        self._factsheet: Factsheet | None = None

    # --- input (the MQTT client's thread) -----------------------------------------------------
    def receive(self, topic_name: str, payload: bytes) -> bool:
        """Take one message; False (and counted) if it was ignored. Never raises."""
        try:
            message = decode(payload, max_bytes=self.max_bytes, max_depth=self.max_depth)
            if topic_name == "state":
                accepted = self._take_state(State.model_validate(message))
            elif topic_name == "connection":
                accepted = self._take_connection(Connection.model_validate(message))
            elif topic_name == "factsheet":
                accepted = self._take_factsheet(Factsheet.model_validate(message))
            else:
                raise BadMessage("unexpected_topic", topic_name)
        except BadMessage as bad:
            self.bad_input[bad.reason] += 1
            return False
        except ValidationError:
            self.bad_input["wrong_schema"] += 1
            return False
        except Exception:  # whatever it was, it must not reach the MQTT thread
            self.bad_input["unreadable"] += 1
            return False
        if accepted:
            with self._changed:
                self.accepted[topic_name] += 1
                self._changed.notify_all()
            self._on_change()
        return accepted

    def _ours(self, manufacturer: str, serial_number: str) -> bool:
        if serial_number != self.serial_number or manufacturer != self.manufacturer:
            self.bad_input["other_vehicle"] += 1
            return False
        return True

    def _take_state(self, state: State) -> bool:
        if not self._ours(state.manufacturer, state.serialNumber):
            return False
        with self._changed:
            last = self._state
            if last is not None and state.headerId <= last.headerId:
                if not (self._online_since_state and state.headerId < last.headerId):
                    self.bad_input["stale_header"] += 1
                    return False
                self._restarts += 1
            self._state = state
            self._state_sequence += 1
            self._online_since_state = False
        return True

    def _take_connection(self, connection: Connection) -> bool:
        if not self._ours(connection.manufacturer, connection.serialNumber):
            return False
        with self._changed:
            self._connection = connection.connectionState
            if connection.connectionState == "ONLINE":
                self._online_since_state = True
        return True

    def _take_factsheet(self, factsheet: Factsheet) -> bool:
        if not self._ours(factsheet.manufacturer, factsheet.serialNumber):
            return False
        with self._changed:
            self._factsheet = factsheet
        return True

    # --- reading (any thread) -----------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        with self._changed:
            return Snapshot(
                self._state,
                self._state_sequence,
                self._restarts,
                self._connection,
                self._factsheet,
                self._online_since_state,
                self.accepted["factsheet"],
            )

    def wait_change(self, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait(timeout_s)

    def wait_for(self, condition: Callable[[Snapshot], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not condition(self.snapshot()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
