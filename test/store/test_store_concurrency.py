"""Exactly one winner per key across threads and processes; group commit; durability."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from typing import Any

from fleet_idempotency.store import Claimed, IdempotencyStore, InProgress, Record, State

from support.store_support import (
    ROBOT,
    Location,
    claim_args,
    make_config,
    read_line,
    spawn_child,
)


def _race_one_key(store: IdempotencyStore, key: str, contenders: int) -> Counter[type]:
    barrier = threading.Barrier(contenders)
    outcomes: list[object] = []
    lock = threading.Lock()

    def contender() -> None:
        barrier.wait()
        outcome = store.claim(**claim_args(key))
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=contender) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Counter(type(o) for o in outcomes)


def test_same_key_from_many_threads_has_exactly_one_winner(store_location: Location) -> None:
    with IdempotencyStore.open(make_config(store_location)) as store:
        for round_number in range(20):
            kinds = _race_one_key(store, f"hot-{round_number}", 8)
            assert kinds == Counter({Claimed: 1, InProgress: 7})


def test_concurrent_claims_share_commits(store_location: Location) -> None:
    threads_n, per_thread = 8, 100
    with IdempotencyStore.open(make_config(store_location)) as store:
        before = store.stats()["commits"]
        barrier = threading.Barrier(threads_n)

        def worker(t: int) -> None:
            barrier.wait()
            for i in range(per_thread):
                store.claim(**claim_args(f"t{t}-{i}"))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = store.stats()
        commits = stats["commits"] - before
        assert stats["claims"] == threads_n * per_thread
        # Without group commit this would be exactly 800 commits (one fsync per claim).
        assert commits < threads_n * per_thread * 0.75, commits
        assert stats["max_commit_batch"] > 1


def test_lone_caller_gets_one_commit_per_claim(store_location: Location) -> None:
    with IdempotencyStore.open(make_config(store_location)) as store:
        before = store.stats()["commits"]
        for i in range(5):
            store.claim(**claim_args(f"k{i}"))
        assert store.stats()["commits"] - before == 5


def _race_processes(location: Location, seeds: list[int], count: int) -> list[dict[str, Any]]:
    IdempotencyStore.open(make_config(location)).close()
    racers = [spawn_child("race", str(location), "key-", str(count), str(s)) for s in seeds]
    for racer in racers:
        assert read_line(racer) == "started"
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    reports = [json.loads(read_line(racer)) for racer in racers]
    for racer in racers:
        assert racer.wait(60) == 0
    wins = Counter(key for report in reports for key in report["won"])
    assert set(wins) == {f"key-{i}" for i in range(count)}
    assert set(wins.values()) == {1}
    winner = {key: report["owner"] for report in reports for key in report["won"]}
    for report in reports:  # every loser was answered with the winner's record
        assert all(winner[key] == owner for key, owner in report["lost_to"].items())
    return reports


def test_processes_claiming_overlapping_keys_win_each_key_exactly_once(
    store_location: Location,
) -> None:
    reports = _race_processes(store_location, [0, 1, 2], 150)
    assert sum(1 for report in reports if report["won"]) >= 2, (
        "the race was not a race: one process won everything"
    )


def test_processes_claiming_the_same_keys_in_the_same_order_win_each_exactly_once(
    store_location: Location,
) -> None:
    # One seed for all: every key is claimed by all racers at about the same instant.
    _race_processes(store_location, [7, 7, 7], 100)


def test_claim_is_durable_when_it_returns(store_location: Location) -> None:
    path = store_location
    child = spawn_child("claim_and_hold", str(path), "k-durable", "move-1")
    assert read_line(child) == "Claimed k-durable"
    assert read_line(child) == "Claimed move-1"
    os.kill(child.pid, signal.SIGKILL)  # no close(), no atexit: only what was committed survives
    child.wait(10)
    with IdempotencyStore.open(make_config(path)) as store:
        pick = store.check(ROBOT, "k-durable")
        assert isinstance(pick, Record)
        # The owner died mid-execution: a pick is never silently re-run.
        assert pick.state == State.INTERRUPTED
        assert [r.key for r in store.last_recovery.resumed] == ["move-1"]


def test_wait_for_final_sees_a_finish_committed_by_another_process(
    store_location: Location,
) -> None:
    body = json.dumps({"finished_by": "another process"})
    with IdempotencyStore.open(make_config(store_location)) as store:
        assert isinstance(store.claim(**claim_args("k-remote")), Claimed)
        waited: list[Record | None] = []
        waiter = threading.Thread(
            target=lambda: waited.append(store.wait_for_final(ROBOT, "k-remote", timeout_s=30))
        )
        waiter.start()
        # No commit of this process wakes the waiter: only polling can see the child's.
        child = spawn_child("finish", str(store_location), "k-remote", body)
        assert read_line(child) == "finished"
        assert child.wait(30) == 0
        waiter.join(10)
        assert not waiter.is_alive()
        assert waited[0] is not None
        assert (waited[0].state, waited[0].result_json) == (State.COMPLETED, body)
