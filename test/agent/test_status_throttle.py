"""Statuses on load change, rate-limited; the heartbeat always goes out."""

from __future__ import annotations

from fleet_idempotency.agent.status_throttle import StatusThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_change_goes_out_and_a_burst_after_it_waits_for_the_interval() -> None:
    clock = Clock()
    throttle = StatusThrottle(0.2, clock)
    assert throttle.on_change()
    # queued, started, done of a zero-duration command: one status, not three
    assert not throttle.on_change() and not throttle.on_change()
    clock.now += 0.2
    assert throttle.on_change()
    assert throttle.suppressed == 2


def test_falling_idle_goes_out_at_once_and_counts_as_the_latest_status() -> None:
    clock = Clock()
    throttle = StatusThrottle(0.2, clock)
    assert throttle.on_change()
    assert not throttle.on_change()  # started
    assert throttle.on_change(idle=True)  # done, nothing left: within the interval
    clock.now += 0.1
    assert not throttle.on_change()
    assert throttle.suppressed == 2


def test_a_heartbeat_counts_as_the_latest_status() -> None:
    clock = Clock()
    throttle = StatusThrottle(0.2, clock)
    throttle.on_heartbeat()
    assert not throttle.on_change()
    clock.now += 0.25
    assert throttle.on_change()


def test_zero_interval_publishes_every_change() -> None:
    throttle = StatusThrottle(0.0, Clock())
    assert all(throttle.on_change() for _ in range(5))


def test_an_idle_robot_heartbeats_only_every_idle_period_a_busy_one_every_time() -> None:
    clock = Clock()
    throttle = StatusThrottle(0.2, clock, idle_period_s=10.0)
    throttle.on_heartbeat()
    clock.now += 1.0
    assert throttle.heartbeat_due(idle=False)  # holding work: pose and load move
    assert not throttle.heartbeat_due(idle=True)
    clock.now += 8.6
    assert not throttle.heartbeat_due(idle=True)
    assert throttle.heartbeat_due(idle=True, slack_s=0.5)  # within the tick's jitter
    throttle.on_heartbeat()
    # A change held back by the interval goes out with the next heartbeat, idle or not.
    assert not throttle.on_change()
    assert throttle.heartbeat_due(idle=True)
    throttle.on_heartbeat()
    assert not throttle.heartbeat_due(idle=True)
