"""The periodic work of every agent in a process, driven by one timer.

Each agent has jobs to do now and then: its status heartbeat, its diagnostics, garbage
collection, keyring reloads, announcing what crash recovery found. With one rclpy timer
per job and agent, an ``agent_host`` of 25 agents woke its executor ~50 times a second,
and every wake-up rebuilds the wait set of all the process's entities in Python: an idle
host burnt a quarter of a core. Here every job of every agent in the process is a
``Job`` in one ``PeriodicWork``, and the process has a single timer, ticking at the
shortest job period, that runs whatever is due (``run_due``), or none: a process that
waits for events on its own loop runs it between them (``run_if_due``). No ROS imports.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(eq=False)
class Job:
    name: str
    period_s: float
    callback: Callable[[], None]
    due: float
    cancelled: bool = field(default=False)

    def cancel(self) -> None:
        self.cancelled = True


class PeriodicWork:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._jobs: list[Job] = []
        self._lock = threading.Lock()
        self._next_due = math.inf  # of the earliest job (a cancelled one may be earlier)

    def every(self, period_s: float, callback: Callable[[], None], *, name: str) -> Job:
        """Run ``callback`` every ``period_s``, the first time one period from now."""
        if not period_s > 0:
            raise ValueError(f"{name}: period must be positive, got {period_s!r}")
        job = Job(name, float(period_s), callback, self._clock() + period_s)
        with self._lock:
            self._jobs.append(job)
            self._next_due = min(self._next_due, job.due)
        return job

    @property
    def jobs(self) -> list[Job]:
        with self._lock:
            return [job for job in self._jobs if not job.cancelled]

    def tick_s(self, default_s: float = 1.0) -> float:
        """How often the timer must tick: the shortest period of any job."""
        return min((job.period_s for job in self.jobs), default=default_s)

    def run_due(self, tick_s: float = 0.0) -> int:
        """Run every job that is due (within half a tick, so that a job whose period is
        the tick never slips a whole tick behind); the number run. A job that raises is
        the caller's to guard: wrap callbacks, one job's failure must not skip the rest."""
        now = self._clock()
        slack = tick_s / 2
        with self._lock:
            self._jobs = [job for job in self._jobs if not job.cancelled]
            due = [job for job in self._jobs if job.due <= now + slack]
            for job in due:
                # Keep the cadence, but after a stall start again from now rather than
                # running a backlog of missed periods.
                job.due = max(job.due + job.period_s, now + job.period_s - slack)
            self._next_due = min((job.due for job in self._jobs), default=math.inf)
        ran = 0
        for job in due:
            if not job.cancelled:
                job.callback()
                ran += 1
        return ran

    def run_if_due(self) -> float:
        """For a loop that waits for events between calls (``ros/side_thread.serve_events``):
        run what is due, if anything is; the seconds until the next job is due. Costs one
        clock read when nothing is, as it is after almost every event."""
        wait_s = self._next_due - self._clock()
        if wait_s > 0:
            return wait_s
        self.run_due()
        return max(0.0, self._next_due - self._clock())
