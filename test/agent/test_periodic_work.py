"""One timer runs the periodic jobs of every agent in a process (agent/periodic.py)."""

from __future__ import annotations

import pytest

from fleet_idempotency.agent.periodic import PeriodicWork


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_tick_runs_every_due_job_of_every_agent() -> None:
    clock = Clock()
    work = PeriodicWork(clock)
    ran: list[str] = []
    for agent in ("amr_1", "amr_2", "arm_1"):
        work.every(1.0, lambda agent=agent: ran.append(f"{agent}.status"), name="status")
        work.every(60.0, lambda agent=agent: ran.append(f"{agent}.gc"), name="gc")
    assert work.tick_s() == 1.0
    assert work.run_due(1.0) == 0  # nothing is due before its first period
    clock.now += 1.0
    assert work.run_due(1.0) == 3
    assert ran == ["amr_1.status", "amr_2.status", "arm_1.status"]
    ran.clear()
    clock.now += 59.0
    work.run_due(1.0)
    assert sorted(ran) == sorted(
        [f"{a}.{job}" for a in ("amr_1", "amr_2", "arm_1") for job in ("status", "gc")]
    )


def test_a_job_whose_period_is_the_tick_runs_on_every_tick_despite_timer_jitter() -> None:
    clock = Clock()
    work = PeriodicWork(clock)
    ran: list[float] = []
    work.every(1.0, lambda: ran.append(clock.now), name="status")
    for late in (0.0, 0.02, -0.03, 0.01, 0.0):  # a timer fires a little early or late
        clock.now = round(clock.now + 1.0 + late, 6)
        work.run_due(1.0)
    assert len(ran) == 5


def test_after_a_stall_a_job_runs_once_not_a_backlog_and_cancelled_jobs_stop() -> None:
    clock = Clock()
    work = PeriodicWork(clock)
    ran: list[str] = []
    work.every(1.0, lambda: ran.append("status"), name="status")
    announce = work.every(1.0, lambda: ran.append("announce"), name="announce")
    clock.now += 10.0
    work.run_due(1.0)
    assert ran == ["status", "announce"]
    announce.cancel()
    clock.now += 1.0
    work.run_due(1.0)
    assert ran == ["status", "announce", "status"]
    assert [job.name for job in work.jobs] == ["status"]


def test_a_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="status"):
        PeriodicWork().every(0.0, lambda: None, name="status")


def test_an_events_loop_runs_what_is_due_and_learns_how_long_it_may_wait() -> None:
    clock = Clock()
    work = PeriodicWork(clock)
    ran: list[str] = []
    work.every(1.0, lambda: ran.append("status"), name="status")
    work.every(2.5, lambda: ran.append("gc"), name="gc")
    assert work.run_if_due() == 1.0  # nothing due: the wait until the status is
    clock.now += 0.4
    assert work.run_if_due() == pytest.approx(0.6)
    assert ran == []
    clock.now += 0.6
    assert work.run_if_due() == pytest.approx(1.0)
    assert ran == ["status"]
    clock.now += 1.0
    assert work.run_if_due() == pytest.approx(0.5)  # the gc, at 2.5
    clock.now += 0.5
    assert work.run_if_due() == pytest.approx(0.5)  # the next status, at 3.0
    assert ran == ["status", "status", "gc"]
    assert PeriodicWork(clock).run_if_due() == float("inf")  # no jobs: wait for events


def test_jobs_added_moments_apart_run_together_on_the_batch_grid() -> None:
    clock = Clock()
    work = PeriodicWork(clock, batch_s=0.05)
    ran: list[str] = []
    for index, offset in enumerate((0.001, 0.013, 0.049)):
        clock.now = 100.0 + offset
        work.every(1.0, lambda index=index: ran.append(f"status_{index}"), name="status")
    clock.now = 101.0
    assert work.run_if_due() == pytest.approx(0.05)  # all three are due at 101.05
    clock.now = 101.0501
    work.run_if_due()
    assert ran == ["status_0", "status_1", "status_2"]
    assert work.run_if_due() == pytest.approx(1.0, abs=1e-3)  # and stay together


def test_a_cancelled_job_never_runs_again_and_leaves_the_others_on_time() -> None:
    clock = Clock()
    work = PeriodicWork(clock)
    ran: list[str] = []
    first = work.every(0.5, lambda: ran.append("announce"), name="announce")
    work.every(1.0, lambda: ran.append("status"), name="status")
    first.cancel()
    assert work.run_if_due() == pytest.approx(0.5)  # its slot is still in the schedule
    clock.now += 0.5
    assert work.run_if_due() == pytest.approx(0.5)
    clock.now += 0.5
    work.run_if_due()
    assert ran == ["status"]


def test_a_job_faster_than_the_batch_grid_keeps_its_own_period() -> None:
    clock = Clock()
    work = PeriodicWork(clock, batch_s=0.25)
    ran: list[float] = []
    work.every(0.1, lambda: ran.append(clock.now), name="status")
    for _ in range(10):
        clock.now = round(clock.now + 0.1, 6)
        work.run_due(0.1)
    assert len(ran) == 10
