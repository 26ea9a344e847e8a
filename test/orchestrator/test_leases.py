"""Leases with a TTL and a fencing token, on a real PostgreSQL lease table."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from fleet_idempotency.orchestrator.leases import TRUST_FRACTION, LeaseKeeper
from fleet_idempotency.orchestrator.postgres_leases import PostgresLeaseTable

ROBOTS = ["forklift_1", "amr_1"]
TTL_S = 1.0


class Replica:
    """One keeper and what its callbacks reported."""

    def __init__(self, url: str, name: str) -> None:
        self.table = PostgresLeaseTable(url)
        self.acquired: list[tuple[str, int, float]] = []
        self.lost: list[str] = []
        self.keeper = LeaseKeeper(
            self.table,
            name,
            ROBOTS,
            ttl_s=TTL_S,
            on_acquired=lambda robot, token: self.acquired.append((robot, token, time.monotonic())),
            on_lost=self.lost.append,
        )


@pytest.fixture
def replicas(postgres_url: str) -> Iterator[Callable[[str], Replica]]:
    made: list[Replica] = []

    def make(name: str) -> Replica:
        made.append(Replica(postgres_url, name))
        return made[-1]

    yield make
    for replica in made:
        replica.table.close()


def step_until(replica: Replica, condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        replica.keeper.step()
        time.sleep(0.02)


def test_one_holder_per_robot_and_a_takeover_only_after_the_old_holder_stopped_trusting(
    replicas: Callable[[str], Replica],
) -> None:
    first, second = replicas("replica-a"), replicas("replica-b")
    first.keeper.step()
    second.keeper.step()
    assert first.keeper.held() == {"forklift_1": 1, "amr_1": 1}
    assert second.keeper.held() == {}
    assert first.table.holders() == {"forklift_1": ("replica-a", 1), "amr_1": ("replica-a", 1)}
    # replica-a stops renewing (frozen, crashed): replica-b waits out the TTL.
    step_until(second, lambda: len(second.keeper.held()) == 2)
    assert second.keeper.held() == {"forklift_1": 2, "amr_1": 2}, "a takeover raises the token"
    # replica-a stopped trusting its leases half a TTL before they could be taken.
    assert first.keeper.token("forklift_1") is None
    taken_at = min(at for _robot, _token, at in second.acquired)
    given_up_at = first.acquired[0][2] + TTL_S * TRUST_FRACTION
    assert taken_at >= given_up_at
    # When it wakes up, its renewal fails and it drops the robots.
    first.keeper.step()
    assert sorted(first.lost) == sorted(ROBOTS)
    assert first.keeper.held() == {}


def test_a_renewing_holder_keeps_its_leases_and_a_clean_stop_hands_over_at_once(
    replicas: Callable[[str], Replica],
) -> None:
    first, second = replicas("replica-a"), replicas("replica-b")
    first.keeper.step()
    deadline = time.monotonic() + 3 * TTL_S
    while time.monotonic() < deadline:  # three TTLs of renewals: never lost, never taken
        first.keeper.step()
        second.keeper.step()
        assert second.keeper.held() == {}
        time.sleep(TTL_S * TRUST_FRACTION / 4)
    assert first.keeper.held() == {"forklift_1": 1, "amr_1": 1} and first.lost == []
    first.keeper.stop()
    assert sorted(first.lost) == sorted(ROBOTS)
    second.keeper.step()
    assert second.keeper.held() == {"forklift_1": 2, "amr_1": 2}


def test_tokens_only_rise_across_releases_and_restarts_of_the_table(postgres_url: str) -> None:
    table = PostgresLeaseTable(postgres_url)
    tokens = []
    for holder in ("a", "b", "a", "c"):
        token = table.acquire("amr_1", holder, TTL_S)
        assert token is not None
        assert table.acquire("amr_1", "intruder", TTL_S) is None
        tokens.append(token)
        table.release("amr_1", holder, token)
    table.close()
    reopened = PostgresLeaseTable(postgres_url)
    assert reopened.acquire("amr_1", "d", TTL_S) == 5
    assert tokens == [1, 2, 3, 4]
    assert not reopened.renew("amr_1", "a", 1, TTL_S), "an old holding cannot be renewed"
    reopened.close()


def test_replicas_starting_together_all_open_the_lease_table(postgres_url: str) -> None:
    opened: list[PostgresLeaseTable] = []
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def open_one() -> None:
        start.wait()
        try:
            opened.append(PostgresLeaseTable(postgres_url))
        except BaseException as error:  # collected for the assertion
            errors.append(error)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for table in opened:
        table.close()
    assert errors == [] and len(opened) == 6
