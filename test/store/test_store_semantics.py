"""Each line of DESIGN.md "Semantics" that concerns the store, pinned on each real backend."""

from __future__ import annotations

import json
import threading

import pytest

from fleet_idempotency.store import (
    Claimed,
    Expired,
    FinalResultConflict,
    IdempotencyStore,
    InProgress,
    InvalidRequest,
    Mismatch,
    NotClaimed,
    Record,
    Replay,
    State,
    Tombstone,
    UnknownKey,
    command_fingerprint,
)

from support.store_support import ROBOT, FakeClock, Location, claim_args, make_config

OK_BODY = json.dumps({"picked": "A1"})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(store_location: Location, clock: FakeClock) -> IdempotencyStore:
    opened = IdempotencyStore.open(
        make_config(store_location, default_retention_s=100, tombstone_retention_s=1000),
        clock=clock,
    )
    yield opened  # type: ignore[misc]
    opened.close()


def test_new_key_is_claimed_in_progress_with_fingerprint_owner_and_times(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    outcome = store.claim(**claim_args("k-123"))
    assert isinstance(outcome, Claimed)
    record = outcome.record
    assert record.state == State.IN_PROGRESS
    assert record.fingerprint == command_fingerprint(ROBOT, "pick", '{"slot": "A1"}')
    assert record.owner == store.owner
    assert record.created_at == clock.now
    assert record.expires_at == clock.now + 100
    assert store.check(ROBOT, "k-123") == record


@pytest.mark.parametrize(
    "bad_key",
    ["", "x" * 129, "has space", "tab\tkey", "ключ", "nul\x00", "new\nline", 42, None],
)
def test_invalid_key_is_rejected_400_and_nothing_stored(
    store: IdempotencyStore, bad_key: object
) -> None:
    with pytest.raises(InvalidRequest) as error:
        store.claim(**{**claim_args("placeholder"), "key": bad_key})
    assert error.value.field == "key"
    assert error.value.status_code == 400
    assert list(store.iter_records()) == []


@pytest.mark.parametrize(
    "good_key", ["k-123", "x" * 128, "a", "0190b4d6-7e3c-7000-8000-5f2a1b3c4d5e", "~!{}"]
)
def test_printable_ascii_keys_of_1_to_128_chars_are_accepted(
    store: IdempotencyStore, good_key: str
) -> None:
    assert isinstance(store.claim(**claim_args(good_key)), Claimed)


def test_bad_scope_robot_and_type_are_rejected_naming_the_field(store: IdempotencyStore) -> None:
    for field in ("scope", "robot_id", "command_type"):
        with pytest.raises(InvalidRequest) as error:
            store.claim(**{**claim_args("k"), field: "bad value"})
        assert error.value.field == field
    assert list(store.iter_records()) == []


@pytest.mark.parametrize(
    "bad_payload", ["not json", "[1, 2]", '"text"', "3", '{"x": NaN}', '{"x": Infinity}', ""]
)
def test_payload_that_is_not_a_json_object_is_rejected(
    store: IdempotencyStore, bad_payload: str
) -> None:
    with pytest.raises(InvalidRequest) as error:
        store.claim(**{**claim_args("k"), "payload_json": bad_payload})
    assert error.value.field == "payload_json"
    assert store.check(ROBOT, "k") is None


def test_same_key_in_two_scopes_is_two_operations(store: IdempotencyStore) -> None:
    assert isinstance(store.claim(**claim_args("k-1", scope="amr-1")), Claimed)
    assert isinstance(store.claim(**claim_args("k-1", scope="amr-2")), Claimed)
    store.finish("amr-1", "k-1", state=State.COMPLETED, status_code=200, result_json=OK_BODY)
    second = store.check("amr-2", "k-1")
    assert isinstance(second, Record) and second.state == State.IN_PROGRESS


def test_payload_key_order_and_whitespace_do_not_cause_a_mismatch(store: IdempotencyStore) -> None:
    first = '{"x": 1.5, "y": 2, "meta": {"b": 1, "a": [1, 2]}}'
    reordered = '{"meta":{"a":[1,2],"b":1},"y":2,"x":1.5}'
    store.claim(**{**claim_args("k"), "payload_json": first})
    assert isinstance(store.claim(**{**claim_args("k"), "payload_json": reordered}), InProgress)


def test_duplicate_of_completed_replays_exact_code_and_body_flagged_replayed(
    store: IdempotencyStore,
) -> None:
    store.claim(**claim_args("k"))
    store.finish(ROBOT, "k", state=State.COMPLETED, status_code=201, result_json=OK_BODY)
    outcome = store.claim(**claim_args("k"))
    assert isinstance(outcome, Replay)
    assert (outcome.status_code, outcome.result_json, outcome.replayed) == (201, OK_BODY, True)
    assert store.stats()["replays"] == 1


def test_duplicate_while_in_progress_is_409_and_not_replayed(store: IdempotencyStore) -> None:
    store.claim(**claim_args("k"))
    outcome = store.claim(**claim_args("k"))
    assert isinstance(outcome, InProgress)
    assert outcome.status_code == 409 and not outcome.replayed
    assert store.stats()["in_progress_hits"] == 1


def test_different_fingerprint_is_422_naming_both_and_record_untouched(
    store: IdempotencyStore,
) -> None:
    store.claim(**claim_args("k", slot="A1"))
    store.finish(ROBOT, "k", state=State.COMPLETED, status_code=200, result_json=OK_BODY)
    before = store.check(ROBOT, "k")
    assert isinstance(before, Record)
    outcome = store.claim(**claim_args("k", slot="B7"))
    assert isinstance(outcome, Mismatch)
    assert outcome.status_code == 422
    assert before.fingerprint in outcome.message
    assert outcome.received_fingerprint in outcome.message
    assert outcome.received_fingerprint != before.fingerprint
    assert store.check(ROBOT, "k") == before


def test_refusal_before_side_effect_releases_so_retry_runs(store: IdempotencyStore) -> None:
    store.claim(**claim_args("k"))
    released = store.release(ROBOT, "k")
    assert released.key == "k"
    assert store.check(ROBOT, "k") is None
    assert isinstance(store.claim(**claim_args("k")), Claimed)


def test_failure_after_execution_is_final_cached_and_never_released(
    store: IdempotencyStore,
) -> None:
    store.claim(**claim_args("k"))
    body = json.dumps({"error": "gripper slipped"})
    store.finish(ROBOT, "k", state=State.FAILED, status_code=500, result_json=body)
    with pytest.raises(NotClaimed):
        store.release(ROBOT, "k")
    outcome = store.claim(**claim_args("k"))
    assert isinstance(outcome, Replay)
    assert (outcome.record.state, outcome.status_code, outcome.result_json) == (
        State.FAILED,
        500,
        body,
    )


def test_finish_is_idempotent_for_same_result_and_refuses_a_different_one(
    store: IdempotencyStore,
) -> None:
    store.claim(**claim_args("k"))
    first = store.finish(ROBOT, "k", state=State.COMPLETED, status_code=200, result_json=OK_BODY)
    assert (
        store.finish(ROBOT, "k", state=State.COMPLETED, status_code=200, result_json=OK_BODY)
        == first
    )
    with pytest.raises(FinalResultConflict):
        store.finish(ROBOT, "k", state=State.FAILED, status_code=500, result_json="{}")
    assert store.check(ROBOT, "k") == first


def test_finish_release_advance_of_unknown_key(store: IdempotencyStore) -> None:
    with pytest.raises(UnknownKey):
        store.finish(ROBOT, "nope", state=State.COMPLETED, status_code=200, result_json="{}")
    with pytest.raises(UnknownKey):
        store.release(ROBOT, "nope")
    with pytest.raises(UnknownKey):
        store.advance(ROBOT, "nope")


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("state", {"state": State.IN_PROGRESS, "status_code": 200, "result_json": "{}"}),
        ("state", {"state": 99, "status_code": 200, "result_json": "{}"}),
        ("status_code", {"state": State.COMPLETED, "status_code": 42, "result_json": "{}"}),
        ("status_code", {"state": State.COMPLETED, "status_code": "200", "result_json": "{}"}),
        ("result_json", {"state": State.COMPLETED, "status_code": 200, "result_json": "{oops"}),
    ],
)
def test_bad_finish_arguments_are_400_and_leave_the_claim(
    store: IdempotencyStore, field: str, kwargs: dict
) -> None:  # type: ignore[type-arg]
    store.claim(**claim_args("k"))
    with pytest.raises(InvalidRequest) as error:
        store.finish(ROBOT, "k", **kwargs)
    assert error.value.field == field
    found = store.check(ROBOT, "k")
    assert isinstance(found, Record) and found.state == State.IN_PROGRESS


def test_oversize_payload_and_result_are_rejected_not_truncated(store_location: Location) -> None:
    config = make_config(store_location, max_payload_bytes=100, max_result_bytes=50)
    with IdempotencyStore.open(config) as store:
        with pytest.raises(InvalidRequest) as error:
            store.claim(**claim_args("big", slot="x" * 100))
        assert error.value.field == "payload_json" and "limit is 100" in str(error.value)
        assert store.check(ROBOT, "big") is None
        store.claim(**claim_args("k"))
        with pytest.raises(InvalidRequest) as error:
            store.finish(
                ROBOT, "k", state=State.COMPLETED, status_code=200, result_json=json.dumps("y" * 60)
            )
        assert error.value.field == "result_json"
        exact = json.dumps("y" * 48)
        assert (
            store.finish(
                ROBOT, "k", state=State.COMPLETED, status_code=200, result_json=exact
            ).result_json
            == exact
        )


def test_accepted_then_advance_then_finish(store: IdempotencyStore) -> None:
    claimed = store.claim(**claim_args("k"), initial_state=State.ACCEPTED)
    assert isinstance(claimed, Claimed) and claimed.record.state == State.ACCEPTED
    assert isinstance(store.claim(**claim_args("k")), InProgress)
    assert store.advance(ROBOT, "k").state == State.IN_PROGRESS
    store.finish(ROBOT, "k", state=State.COMPLETED, status_code=200, result_json=OK_BODY)
    with pytest.raises(NotClaimed):
        store.advance(ROBOT, "k")
    with pytest.raises(InvalidRequest):
        store.claim(**claim_args("j"), initial_state=State.COMPLETED)


def test_status_check_is_read_only(store: IdempotencyStore) -> None:
    store.claim(**claim_args("k"))
    commits = store.stats()["commits"]
    for _ in range(5):
        store.check(ROBOT, "k")
        store.check(ROBOT, "absent")
    assert store.stats()["commits"] == commits
    assert store.check(ROBOT, "absent") is None


def test_wait_for_final_wakes_when_finished_in_same_process(store: IdempotencyStore) -> None:
    store.claim(**claim_args("k"))
    started = threading.Event()
    result: list[Record | None] = []

    def waiter() -> None:
        started.set()
        result.append(store.wait_for_final(ROBOT, "k", timeout_s=30))

    thread = threading.Thread(target=waiter)
    thread.start()
    started.wait(5)
    store.finish(ROBOT, "k", state=State.COMPLETED, status_code=200, result_json=OK_BODY)
    thread.join(10)
    assert not thread.is_alive()
    assert result[0] is not None and result[0].state == State.COMPLETED


def test_wait_for_final_times_out_with_the_in_flight_record(store: IdempotencyStore) -> None:
    store.claim(**claim_args("k"))
    still = store.wait_for_final(ROBOT, "k", timeout_s=0.02)
    assert still is not None and still.state == State.IN_PROGRESS
    assert store.wait_for_final(ROBOT, "absent", timeout_s=0.02) is None


# -- TTL, GC, tombstones ----------------------------------------------------------------------


def _finished(store: IdempotencyStore, key: str, **kw: object) -> Record:
    store.claim(**claim_args(key, **kw))  # type: ignore[arg-type]
    return store.finish(ROBOT, key, state=State.COMPLETED, status_code=200, result_json=OK_BODY)


def test_gc_turns_expired_records_into_tombstones_then_purges_them(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    record = _finished(store, "old")
    clock.advance(50)
    _finished(store, "young")
    clock.advance(60)  # "old" is 110 s past its finish (retention 100), "young" 60
    report = store.gc()
    assert (report.records_purged, report.tombstones_written) == (1, 1)
    tombstone = store.check(ROBOT, "old")
    assert isinstance(tombstone, Tombstone)
    assert (tombstone.fingerprint, tombstone.state, tombstone.status_code) == (
        record.fingerprint,
        State.COMPLETED,
        200,
    )
    assert isinstance(store.check(ROBOT, "young"), Record)
    clock.advance(1000)
    report = store.gc()
    assert report.tombstones_purged == 1 and report.records_purged == 1
    assert store.check(ROBOT, "old") is None


def test_expired_key_is_answered_410_use_status_check_by_default(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    _finished(store, "k")
    clock.advance(101)
    before_gc = store.claim(**claim_args("k"))  # expired but not yet collected
    store.gc()
    after_gc = store.claim(**claim_args("k"))
    for outcome in (before_gc, after_gc):
        assert isinstance(outcome, Expired)
        assert outcome.status_code == 410 and "use the status check" in outcome.message
    assert store.stats()["expired_hits"] == 2


def test_expired_key_policy_new_runs_it_as_a_new_command(
    store_location: Location, clock: FakeClock
) -> None:
    config = make_config(store_location, default_retention_s=100, expired_key_policy="new")
    with IdempotencyStore.open(config, clock=clock) as store:
        _finished(store, "a")
        _finished(store, "b")
        clock.advance(101)
        store.gc(max_batches=None)
        assert isinstance(store.claim(**claim_args("a")), Claimed)  # from a tombstone
        assert isinstance(store.claim(**claim_args("b", slot="Z9")), Claimed)
        found = store.check(ROBOT, "b")
        assert isinstance(found, Record) and found.state == State.IN_PROGRESS


def test_key_is_new_again_once_its_tombstone_lapsed(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    _finished(store, "k")
    clock.advance(1101)
    assert isinstance(store.claim(**claim_args("k")), Claimed)


def test_retention_per_command_type_and_per_caller(
    store_location: Location, clock: FakeClock
) -> None:
    config = make_config(store_location, default_retention_s=100, retention_s_by_type={"dock": 10})
    with IdempotencyStore.open(config, clock=clock) as store:
        docked = store.claim(**claim_args("d", command_type="dock"))
        custom = store.claim(**claim_args("c"), retention_s=5000)
        assert isinstance(docked, Claimed) and docked.record.expires_at == clock.now + 10
        assert isinstance(custom, Claimed) and custom.record.expires_at == clock.now + 5000
        with pytest.raises(InvalidRequest):
            store.claim(**claim_args("x"), retention_s=-1)


def test_gc_never_purges_in_flight_records_it_defers_them(
    store: IdempotencyStore, clock: FakeClock
) -> None:
    store.claim(**claim_args("running"))
    clock.advance(500)
    report = store.gc()
    assert report.records_purged == 0 and report.in_flight_deferred == 1
    found = store.check(ROBOT, "running")
    assert isinstance(found, Record) and found.expires_at > clock.now
    assert isinstance(store.claim(**claim_args("running")), InProgress)


def test_gc_works_in_small_batches(store_location: Location, clock: FakeClock) -> None:
    config = make_config(store_location, default_retention_s=10, gc_batch_size=7, durable=False)
    with IdempotencyStore.open(config, clock=clock) as store:
        for i in range(30):
            _finished(store, f"k{i}")
        clock.advance(11)
        one = store.gc(max_batches=1)
        assert one.records_purged == 7 and not one.complete
        rest = store.gc()
        assert rest.records_purged == 23 and rest.complete and rest.batches >= 4
        assert store.stats()["records"] == 0


def test_claim_many_is_one_commit_and_per_request_outcomes(store: IdempotencyStore) -> None:
    from fleet_idempotency.store import ClaimRequest

    store.claim(**claim_args("dup"))
    commits = store.stats()["commits"]
    requests = [ClaimRequest(**claim_args(f"b{i}")) for i in range(10)]
    requests += [ClaimRequest(**claim_args("dup")), ClaimRequest(**claim_args("b0"))]
    outcomes = store.claim_many(requests)
    assert [type(o) for o in outcomes] == [Claimed] * 10 + [InProgress, InProgress]
    assert store.stats()["commits"] == commits + 1
    with pytest.raises(InvalidRequest) as error:
        store.claim_many(
            [ClaimRequest(**claim_args("ok")), ClaimRequest(**{**claim_args("x"), "key": ""})]
        )
    assert error.value.field == "requests[1].key"
    assert store.check(ROBOT, "ok") is None


def test_metrics_count_outcomes_and_latency(store: IdempotencyStore) -> None:
    store.claim(**claim_args("k"))
    store.claim(**claim_args("k"))
    store.claim(**claim_args("k", slot="B"))
    store.release(ROBOT, "k")
    stats = store.stats()
    assert (stats["claims"], stats["in_progress_hits"], stats["mismatches"], stats["releases"]) == (
        1,
        1,
        1,
        1,
    )
    assert stats["claim_latency_samples"] == 3 and stats["claim_latency_max_s"] > 0
