"""The orchestrator's dispatch thread: woken by work, asleep until the next deadline.

A submit, a result or a status ``kick``s it; it then sends every delivery that is due,
appends the events of what it sent (and of everything else deferred) in one durable
commit, and sleeps until the earliest retry, offline check or end of a busy pause, or the
next kick. No fixed tick: an idle fleet costs nothing here, and a lone command goes out
the moment it is accepted. No ROS imports: ``send`` is the node's publisher.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from fleet_idempotency.protocol import Delivery

# Fault injection holds deliveries back "one round"; without a fixed tick, a round is this.
HOLD_BACK_S = 0.01
# An upper bound on any sleep, so a clock jump or a lost kick can never stall dispatch.
MAX_SLEEP_S = 1.0


class Dispatching(Protocol):
    def dispatch(self) -> list[Delivery]: ...
    def flush_events(self) -> None: ...
    def next_deadline(self) -> float | None: ...


class DispatchLoop:
    def __init__(
        self,
        core: Dispatching,
        send: Callable[[list[Delivery]], None],
        *,
        counters: Counter[str],
        on_error: Callable[[Exception], None],
        clock: Callable[[], float] = time.monotonic,
        hold_back: Callable[[Delivery], bool] = lambda _delivery: False,
    ) -> None:
        self._core = core
        self._send = send
        self._counters = counters
        self._on_error = on_error
        self._clock = clock
        self._hold_back = hold_back
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._held: list[Delivery] = []
        self._thread = threading.Thread(target=self._run, name="orchestrator-dispatch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._round()
            except Exception as error:  # the loop must outlive anything one round does
                self._counters["dispatch_errors"] += 1
                self._on_error(error)
            self._wake.wait(self._sleep_s())
        try:
            self._core.flush_events()  # what was deferred reaches the log before we exit
        except Exception as error:
            self._on_error(error)

    def _round(self) -> None:
        late, self._held = self._held, []
        deliveries = []
        for delivery in self._core.dispatch():
            if self._hold_back(delivery):
                self._held.append(delivery)  # sent next round, after fresher ones
                self._counters["injected_reordered_deliveries"] += 1
            else:
                deliveries.append(delivery)
        self._counters["dispatch_rounds"] += 1
        if deliveries or late:
            self._send(deliveries + late)
        self._core.flush_events()

    def _sleep_s(self) -> float:
        deadline = self._core.next_deadline()
        sleep = MAX_SLEEP_S if deadline is None else deadline - self._clock()
        if self._held:
            sleep = min(sleep, HOLD_BACK_S)
        return max(0.0, min(sleep, MAX_SLEEP_S))
