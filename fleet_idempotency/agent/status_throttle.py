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
An idle robot's heartbeat goes out only every ``idle_period_s`` (``heartbeat_due``): that
it is alive, DDS tells (its status publisher's liveliness, ros/qos.py), and a fleet of
1,000 idle robots sent the orchestrator 1,000 statuses a second that changed nothing.
No ROS imports.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class StatusThrottle:
    def __init__(
        self,
        min_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        idle_period_s: float = 0.0,
    ) -> None:
        self.min_interval_s = min_interval_s
        self.idle_period_s = idle_period_s
        self._clock = clock
        self._last = -float("inf")
        self._held_back = False  # a change not published yet: the next heartbeat carries it
        self._lock = threading.Lock()
        self.suppressed = 0

    def on_change(self, idle: bool = False) -> bool:
        """True if this change should be published now; ``idle``: the robot holds no
        command any more."""
        with self._lock:
            now = self._clock()
            if not idle and now - self._last < self.min_interval_s:
                self.suppressed += 1
                self._held_back = True
                return False
            self._last = now
            self._held_back = False
            return True

    def heartbeat_due(self, idle: bool, slack_s: float = 0.0) -> bool:
        """Whether the periodic status should go out now: always while the robot holds work
        (its pose and load move) or a change was held back; when ``idle``, once the last
        status is ``idle_period_s`` old (less ``slack_s``, the heartbeat's own jitter)."""
        with self._lock:
            if not idle or self._held_back:
                return True
            return self._clock() - self._last >= self.idle_period_s - slack_s

    def on_heartbeat(self) -> None:
        """A status went out: it carries whatever changed since the last one."""
        with self._lock:
            self._last = self._clock()
            self._held_back = False
