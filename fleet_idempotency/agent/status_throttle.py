"""When a robot's load changes, publish its status, but not more often than it is useful.

Every command changes the load three times (queued, started, done); publishing each
change made statuses the commonest message in the fleet. The orchestrator dispatches by
its own count of what it has in flight and needs a status only to learn the advertised
capacity, to hear that a robot is alive, and to end a busy pause early. So: a change is
published at once when the last status is older than ``min_interval_s``, otherwise it is
left to the periodic heartbeat (``status_period_s``), which always publishes.
Except one change: the robot falling idle always goes out at once. Its status names the
last command it finished, which tells the orchestrator within moments that an answer was
lost on the way (25 % of them in the chaos run), instead of at a re-send 0.1 s or more
later; and a loaded robot, the throttle's reason, seldom falls idle.
No ROS imports.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class StatusThrottle:
    def __init__(self, min_interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._last = -float("inf")
        self._lock = threading.Lock()
        self.suppressed = 0

    def on_change(self, idle: bool = False) -> bool:
        """True if this change should be published now; ``idle``: the robot holds no
        command any more."""
        with self._lock:
            now = self._clock()
            if not idle and now - self._last < self.min_interval_s:
                self.suppressed += 1
                return False
            self._last = now
            return True

    def on_heartbeat(self) -> None:
        """The periodic status went out: it carries whatever changed since."""
        with self._lock:
            self._last = self._clock()
