"""Crash recovery: dead owners' in-flight records resolved by policy, never re-run silently."""

from __future__ import annotations

import json
import os
import random
import signal

from fleet_idempotency.store import (
    INTERRUPTED_STATUS_CODE,
    Claimed,
    IdempotencyStore,
    InProgress,
    Record,
    Replay,
    State,
    current_owner,
    is_alive,
)

from support.store_support import (
    ROBOT,
    Location,
    claim_args,
    make_config,
    read_line,
    spawn_child,
)


def test_owner_identity_detects_dead_and_reused_processes() -> None:
    me = current_owner()
    assert is_alive(me)
    boot, pid, start = me.split("/")
    assert not is_alive(f"{boot}/{pid}/{int(start) + 1}")  # same pid, other process
    assert not is_alive(f"another-boot/{pid}/{start}")
    assert not is_alive(f"{boot}/999999999/1")


def test_recovery_interrupts_picks_and_resumes_moves_of_a_dead_owner(
    store_location: Location,
) -> None:
    path = store_location
    child = spawn_child("claim_and_hold", str(path), "pick-1", "move-1", "pick-2")
    while read_line(child) != "ready":
        pass
    with IdempotencyStore.open(make_config(path)) as store:
        # The child is alive: its claims are untouched.
        assert store.last_recovery.resumed == [] and store.last_recovery.interrupted == []
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        report = store.recover()
        assert sorted(r.key for r in report.interrupted) == ["pick-1", "pick-2"]
        assert [r.key for r in report.resumed] == ["move-1"]
        resumed = store.check(ROBOT, "move-1")
        assert isinstance(resumed, Record)
        assert (
            resumed.state == State.IN_PROGRESS
            and resumed.owner == store.owner
            and resumed.attempt == 2
        )
        interrupted = store.check(ROBOT, "pick-1")
        assert isinstance(interrupted, Record) and interrupted.state == State.INTERRUPTED
        assert interrupted.status_code == INTERRUPTED_STATUS_CODE
        assert "reconciliation" in json.loads(interrupted.result_json)["message"]
        # Final and cached: a retry is answered, never executed.
        replay = store.claim(**claim_args("pick-1"))
        assert isinstance(replay, Replay) and replay.status_code == INTERRUPTED_STATUS_CODE
        assert isinstance(
            store.claim(**claim_args("move-1", command_type="move_to_waypoint")), InProgress
        )
        assert store.recover().resumed == []  # now owned by a live process: us
        assert store.stats()["recovered_interrupted"] == 2


def test_two_processes_recovering_at_once_never_resume_the_same_record(
    store_location: Location,
) -> None:
    path = store_location
    keys = [f"move-{i}" for i in range(40)]
    victim = spawn_child("claim_and_hold", str(path), *keys)
    while read_line(victim) != "ready":
        pass
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    recoverers = [spawn_child("recover", str(path)) for _ in range(2)]
    for child in recoverers:
        assert read_line(child) == "started"
    for child in recoverers:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    reports = [json.loads(read_line(child)) for child in recoverers]
    for child in recoverers:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)
    resumed = [key for report in reports for key in report["resumed"]]
    assert sorted(resumed) == sorted(keys)  # each exactly once, by one of the two


def test_accepted_records_of_a_dead_owner_resume_whatever_the_type(
    store_location: Location,
) -> None:
    config = make_config(store_location)
    with IdempotencyStore.open(config, owner="boot/1/1") as first:
        first.claim(**claim_args("queued-pick"), initial_state=State.ACCEPTED)
        first.claim(**claim_args("running-pick"))
    with IdempotencyStore.open(config, owner="boot/2/2", owner_alive=lambda owner: False) as second:
        assert [r.key for r in second.last_recovery.resumed] == ["queued-pick"]
        assert [r.key for r in second.last_recovery.interrupted] == ["running-pick"]


def test_reconcile_policy_hands_begun_records_back_to_the_caller(
    store_location: Location,
) -> None:
    """For a backend that can ask its robot: begun records are re-owned and listed for
    reconciliation, neither resumed (re-run) nor interrupted; queued ones still resume."""
    config = make_config(store_location, default_recovery_policy="reconcile")
    with IdempotencyStore.open(config, owner="boot/1/1") as first:
        first.claim(**claim_args("queued-pick"), initial_state=State.ACCEPTED)
        first.claim(**claim_args("running-pick"))
    with IdempotencyStore.open(config, owner="boot/2/2", owner_alive=lambda owner: False) as second:
        report = second.last_recovery
        assert [r.key for r in report.resumed] == ["queued-pick"]
        assert [r.key for r in report.reconciling] == ["running-pick"]
        assert report.interrupted == []
        record = second.check(ROBOT, "running-pick")
        assert isinstance(record, Record) and record.state == State.IN_PROGRESS
        assert record.owner == second.owner and record.attempt == 2
        # Until the caller records what the robot said, a retry waits (409), never runs.
        assert isinstance(second.claim(**claim_args("running-pick")), InProgress)
        assert second.stats()["recovered_reconciling"] == 1


def test_random_kill_9_while_claiming_and_finishing(store_location: Location) -> None:
    path = store_location
    rng = random.Random(20260)
    acknowledged_claims: dict[str, str] = {}
    acknowledged_finishes: set[str] = set()
    for iteration in range(25):
        child = spawn_child("crash_loop", str(path), str(iteration))
        assert read_line(child) == "open"
        for _ in range(rng.randint(0, 40)):
            line = read_line(child).split()
            if line[0] == "C":
                acknowledged_claims[line[1]] = line[2]
            else:
                acknowledged_finishes.add(line[1])
        os.kill(child.pid, signal.SIGKILL)  # at a random point of the claim/finish loop
        child.wait(10)
        assert child.stdout is not None
        for rest in child.stdout.read().split("\n"):  # acks already written before the kill
            parts = rest.split()
            if parts and parts[0] == "C":
                acknowledged_claims[parts[1]] = parts[2]
            elif parts and parts[0] == "F":
                acknowledged_finishes.add(parts[1])
        with IdempotencyStore.open(make_config(path)) as store:
            in_flight = {r.key: r for r in store.iter_records() if r.state.is_in_flight}
            for key, command_type in acknowledged_claims.items():
                found = store.check(ROBOT, key)
                assert isinstance(found, Record), f"acknowledged claim {key} lost"
                if key in acknowledged_finishes:
                    assert found.state == State.COMPLETED
                elif command_type == "move_to_waypoint":
                    assert found.state in {State.IN_PROGRESS, State.COMPLETED}
                else:
                    assert found.state in {State.INTERRUPTED, State.COMPLETED}
            # Nothing in flight is left owned by the dead child.
            assert all(r.owner == store.owner for r in in_flight.values())
            for record in in_flight.values():  # finish resumed moves, as an agent would
                store.finish(
                    ROBOT, record.key, state=State.COMPLETED, status_code=200, result_json="{}"
                )
        # The store stays usable after every crash.
        with IdempotencyStore.open(make_config(path)) as store:
            assert isinstance(store.claim(**claim_args(f"after-{iteration}")), Claimed)
            store.release(ROBOT, f"after-{iteration}")
    assert len(acknowledged_claims) > 50
