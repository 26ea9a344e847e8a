"""Delayed acknowledgements: a 202 the final result makes unnecessary is never sent.

A robot answers every delivery at once: 202 when it claimed the key, so that the sender
stops re-sending and counts the command as held. When the command starts at once (the
worker is idle) and finishes quickly, the final result follows the 202 within
milliseconds and says everything the 202 said. So the 202 of such a command is held for
``delay_s``: if the final result is published first, the 202 is dropped (one message
fewer, for the robot and for the orchestrator, which also skips a dispatch round); if
not, it is published when the delay ends, as TCP's delayed ACK does. Only the claim's
*answer* waits: the claim itself is durable before anything runs, as always.

One thread per process serves every agent's held answers, and sleeps while none is
held. No ROS imports.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable

Publish = Callable[[], None]


class DelayedAcks:
    def __init__(
        self,
        delay_s: float,
        *,
        on_error: Callable[[Exception], None] = lambda _error: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_error``: told about an exception a held publish raised (e.g. the node is
        shutting down); the thread goes on with the others."""
        if delay_s <= 0:
            raise ValueError("delay_s must be positive (0 means: do not delay, no DelayedAcks)")
        self.delay_s = delay_s
        self._on_error = on_error
        self._clock = clock
        self._held: dict[Hashable, tuple[int, Publish]] = {}
        self._deadlines: list[tuple[float, int, Hashable]] = []
        self._order = itertools.count()
        # Held across a publish, so that ``settle`` returning means the 202 is either gone
        # or already out: a final result published after it never overtakes its 202.
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def hold(self, token: Hashable, publish: Publish) -> None:
        """Publish the answer ``delay_s`` from now, unless ``settle(token)`` comes first."""
        with self._lock:
            if self._closed:
                publish_now = True
            else:
                publish_now = False
                order = next(self._order)
                self._held[token] = (order, publish)
                heapq.heappush(self._deadlines, (self._clock() + self.delay_s, order, token))
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="delayed-acks", daemon=True
                    )
                    self._thread.start()
                else:
                    self._lock.notify()  # it may sleep towards a later deadline
        if publish_now:
            publish()

    def settle(self, token: Hashable) -> bool:
        """The final answer is about to go out: drop the held one. True if it was held."""
        with self._lock:
            return self._held.pop(token, None) is not None

    def held(self) -> int:
        with self._lock:
            return len(self._held)

    def close(self) -> None:
        """Publish what is held now (the sender must not wait for it) and stop."""
        with self._lock:
            self._closed = True
            pending = [publish for _, publish in self._held.values()]
            self._held = {}
            self._deadlines.clear()
            self._lock.notify()
        for publish in pending:
            self._publish(publish)

    def _run(self) -> None:
        with self._lock:
            while not self._closed:
                if not self._deadlines:
                    self._lock.wait()
                    continue
                deadline, order, token = self._deadlines[0]
                wait_s = deadline - self._clock()
                if wait_s > 0:
                    self._lock.wait(wait_s)
                    continue
                heapq.heappop(self._deadlines)
                # Only the answer this deadline was set for: a key settled and held again
                # has a later deadline of its own.
                if self._held.get(token, (None,))[0] == order:
                    self._publish(self._held.pop(token)[1])

    def _publish(self, publish: Publish) -> None:
        try:
            publish()
        except Exception as error:
            self._on_error(error)
