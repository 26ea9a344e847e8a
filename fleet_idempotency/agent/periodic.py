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

import heapq
import itertools
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
    """``batch_s``: due times are rounded up to multiples of it (or of a job's period, if
    shorter), so that the jobs of many agents, started over a few seconds, run together
    in a few wake-ups a second rather than one wake-up each (a 1,000-robot host woke
    1,000 times a second for heartbeats)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, batch_s: float = 0.0) -> None:
        self._clock = clock
        self._batch_s = batch_s
        # A heap of (due, order, job): what is due is found without looking at the rest.
        # Scanning every job on each run made a host's idle cost grow with the square of
        # its agents. A cancelled job stays in the heap until it comes up.
        self._heap: list[tuple[float, int, Job]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()

    def every(self, period_s: float, callback: Callable[[], None], *, name: str) -> Job:
        """Run ``callback`` every ``period_s``, the first time one period from now."""
        if not period_s > 0:
            raise ValueError(f"{name}: period must be positive, got {period_s!r}")
        job = Job(
            name, float(period_s), callback, self._on_grid(self._clock() + period_s, period_s)
        )
        with self._lock:
            heapq.heappush(self._heap, (job.due, next(self._order), job))
        return job

    @property
    def jobs(self) -> list[Job]:
        with self._lock:
            return [job for _, _, job in sorted(self._heap) if not job.cancelled]

    @property
    def _next_due(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def tick_s(self, default_s: float = 1.0) -> float:
        """How often the timer must tick: the shortest period of any job."""
        return min((job.period_s for job in self.jobs), default=default_s)

    def run_due(self, tick_s: float = 0.0) -> int:
        """Run every job that is due (within half a tick, so that a job whose period is
        the tick never slips a whole tick behind); the number run. A job that raises is
        the caller's to guard: wrap callbacks, one job's failure must not skip the rest."""
        now = self._clock()
        slack = tick_s / 2
        due: list[Job] = []
        with self._lock:
            taken: list[tuple[float, int, Job]] = []
            while self._heap and self._heap[0][0] <= now + slack:
                taken.append(heapq.heappop(self._heap))
            for _, order, job in taken:
                if job.cancelled:
                    continue
                due.append(job)
                # Keep the cadence (a job run a little late stays on its grid slot), but
                # after a stall of a period or more start again from now rather than
                # running a backlog of missed periods.
                following = job.due + job.period_s
                job.due = self._on_grid(
                    following if following > now else now + job.period_s, job.period_s
                )
                heapq.heappush(self._heap, (job.due, order, job))
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

    def _on_grid(self, due: float, period_s: float) -> float:
        # A grid no coarser than the job's period, which it would otherwise stretch.
        grid = min(self._batch_s, period_s)
        if grid <= 0:
            return due
        # Less a hair: a due time already on the grid must not move up a slot because
        # of how floating point rounded it.
        return math.ceil(due / grid - 1e-6) * grid
