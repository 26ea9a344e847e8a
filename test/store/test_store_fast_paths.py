"""The shortcuts taken for speed give exactly the answers of the slow paths they replace."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.store import (
    ClaimRequest,
    IdempotencyStore,
    InvalidRequest,
    Mismatch,
    Record,
    Replay,
    State,
    Tombstone,
    command_fingerprint,
)
from fleet_idempotency.store.group_commit import GroupCommitter
from fleet_idempotency.store.metrics import Metrics
from fleet_idempotency.store.persistence.codec import (
    decode_record,
    decode_tombstone,
    encode_record,
    encode_tombstone,
)
from fleet_idempotency.store.persistence.rwlock import SharedExclusiveLock
from fleet_idempotency.store.requests import validate_claim

from support.store_support import ROBOT, Location, claim_args, make_config

RID = b"amr-1\x00k1"


def _record(**changes: Any) -> Record:
    base = Record(
        scope="amr-1",
        key="k1",
        fingerprint="f" * 64,
        state=State.COMPLETED,
        status_code=200,
        result_json='{"msg": "déjà \\"vu\\"", "n": [1, 2.5]}',
        robot_id="amr-1",
        command_type="pick",
        payload_json='{"slot": "Ä1"}',
        owner="boot/1/2",
        created_at=1_700_000_000.125,
        updated_at=1_700_000_001.5,
        expires_at=1_700_086_401.5,
        retention_s=86400.0,
        attempt=2,
    )
    return base.replace(**changes)


# -- codec ------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", list(State))
def test_record_codec_round_trips_every_state_and_stays_plain_json(state: State) -> None:
    record = _record(state=state)
    raw = encode_record(record)
    assert decode_record(RID, raw) == record
    # Still what docs/store.md promises an operator: a compact positional JSON array.
    parsed = json.loads(raw)
    assert parsed[:3] == [record.fingerprint, int(state), 200]
    assert raw == json.dumps(parsed, separators=(",", ":"), ensure_ascii=False).encode()


def test_tombstone_codec_round_trips() -> None:
    tombstone = Tombstone("amr-1", "k1", "f" * 64, State.FAILED, 500, "pick", 1.5, 2.25)
    assert decode_tombstone(RID, encode_tombstone(tombstone)) == tombstone


@pytest.mark.parametrize("raw", [b"", b"[1,2", b'["a"] x', b"nope"])
def test_codec_refuses_malformed_stored_values(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_record(RID, raw)


# -- replay without re-fingerprinting -------------------------------------------------------


def _request(payload_json: str, **changes: Any) -> ClaimRequest:
    fields: dict[str, Any] = {
        "scope": ROBOT,
        "key": "k1",
        "robot_id": ROBOT,
        "command_type": "pick",
        "payload_json": payload_json,
    }
    fields.update(changes)
    return ClaimRequest(**fields)


def test_identical_resend_reuses_the_stored_fingerprint_which_equals_a_recomputed_one(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path / "s", durable=False)
    payload = '{"slot": "A1", "n": 1}'
    stored = _record(payload_json=payload, fingerprint=command_fingerprint(ROBOT, "pick", payload))
    fast = validate_claim(config, _request(payload), stored=stored)
    slow = validate_claim(config, _request(payload))
    assert fast == slow
    # Not identical (key order): the full path runs and still finds the same fingerprint.
    reordered = validate_claim(config, _request('{"n":1,"slot":"A1"}'), stored=stored)
    assert reordered.fingerprint == stored.fingerprint
    # A different robot or type is never taken from the stored record.
    other = validate_claim(config, _request(payload, command_type="place"), stored=stored)
    assert other.fingerprint != stored.fingerprint


def test_identical_resend_is_still_validated_for_the_other_fields(tmp_path: Path) -> None:
    config = make_config(tmp_path / "s", durable=False)
    payload = '{"slot": "A1"}'
    stored = _record(payload_json=payload)
    with pytest.raises(InvalidRequest) as bad_retention:
        validate_claim(config, _request(payload, retention_s=-1), stored=stored)
    assert bad_retention.value.field == "retention_s"
    with pytest.raises(InvalidRequest) as bad_state:
        validate_claim(config, _request(payload, initial_state=State.COMPLETED), stored=stored)
    assert bad_state.value.field == "initial_state"
    # The size limit is configuration: lowered since the record was stored, it applies.
    lowered = make_config(tmp_path / "s", durable=False, max_payload_bytes=8)
    with pytest.raises(InvalidRequest) as too_big:
        validate_claim(lowered, _request(payload), stored=stored)
    assert too_big.value.field == "payload_json"


def test_replay_and_mismatch_answers_through_the_store(store_location: Location) -> None:
    with IdempotencyStore.open(make_config(store_location, durable=False)) as store:
        store.claim(**claim_args("k1"))
        store.finish(ROBOT, "k1", state=State.COMPLETED, status_code=200, result_json="{}")
        assert isinstance(store.claim(**claim_args("k1")), Replay)
        reordered = dict(claim_args("k1"), payload_json='{ "slot":"A1" }')
        assert isinstance(store.claim(**reordered), Replay)
        assert isinstance(store.claim(**claim_args("k1", slot="B2")), Mismatch)
        with pytest.raises(InvalidRequest):
            store.claim(**dict(claim_args("k1"), robot_id="bad robot"))


# -- group commit -------------------------------------------------------------------------------


class _RecordingBackend:
    """Runs each transaction's jobs and remembers who ran them; can hold a commit open."""

    readonly = False

    def __init__(self) -> None:
        self.transactions: list[list[str]] = []
        self.threads: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()

    def run_write(self, apply: Callable[[Any], Any]) -> Any:
        self.entered.set()
        self.hold.wait()
        view = _View()
        result = apply(view)
        self.transactions.append(view.names)
        self.threads.append(threading.current_thread().name)
        return result


class _View:
    def __init__(self) -> None:
        self.names: list[str] = []


def _job(name: str) -> Callable[[Any], str]:
    def apply(view: Any) -> str:
        view.names.append(name)
        return name

    return apply


def _committer(backend: _RecordingBackend) -> GroupCommitter:
    return GroupCommitter(backend, Metrics(), max_batch=64, on_commit=lambda: None)  # type: ignore[arg-type]


def test_a_lone_write_commits_in_the_callers_thread() -> None:
    backend = _RecordingBackend()
    committer = _committer(backend)
    try:
        assert committer.submit(_job("a")) == "a"
        assert backend.threads == [threading.current_thread().name]
    finally:
        committer.close()


def test_writes_queued_during_a_commit_share_the_next_one_and_gc_goes_alone() -> None:
    backend = _RecordingBackend()
    committer = _committer(backend)
    results: dict[str, object] = {}

    def submit(name: str, background: bool = False) -> threading.Thread:
        def run() -> None:
            results[name] = committer.submit(_job(name), background=background)

        thread = threading.Thread(target=run, name=f"caller-{name}")
        thread.start()
        return thread

    try:
        backend.hold.clear()
        first = submit("first")
        assert backend.entered.wait(5)
        # Queued while "first" commits: a GC step, then two claims.
        queued = [submit("gc", background=True)]
        _wait_queued(committer, background=1)
        queued += [submit("c1"), submit("c2")]
        _wait_queued(committer, foreground=2)
        backend.hold.set()
        for thread in [first, *queued]:
            thread.join(5)
        assert results == {"first": "first", "gc": "gc", "c1": "c1", "c2": "c2"}
        # Claims queued behind a GC step go first, together; the step gets its own commit.
        assert backend.transactions == [["first"], ["c1", "c2"], ["gc"]]
    finally:
        backend.hold.set()
        committer.close()


def _wait_queued(committer: GroupCommitter, *, foreground: int = 0, background: int = 0) -> None:
    for _ in range(5000):
        with committer._cond:
            if len(committer._foreground) >= foreground and (
                len(committer._background) >= background
            ):
                return
        threading.Event().wait(0.001)
    raise AssertionError("jobs were not queued")


def test_background_jobs_are_not_starved_by_a_stream_of_claims() -> None:
    backend = _RecordingBackend()
    committer = _committer(backend)
    try:
        with committer._cond:
            # As if a commit were running while a GC step and claims queued up.
            committer._busy = True
            committer._background.append(_JobStub("gc"))  # type: ignore[arg-type]
            committer._foreground.extend(_JobStub(f"c{i}") for i in range(3))  # type: ignore[misc]
            batches = [committer._next_batch() for _ in range(2)]
            committer._busy = False
        names = [[job.name for job in batch] for batch in batches]  # type: ignore[attr-defined]
        assert names == [["c0", "c1", "c2"], ["gc"]]
    finally:
        committer.close()


class _JobStub:
    def __init__(self, name: str) -> None:
        self.name = name


# -- shared/exclusive lock ----------------------------------------------------------------------


def test_exclusive_waits_for_readers_of_other_threads_and_reads_nest() -> None:
    lock = SharedExclusiveLock()
    reading, release_reader, exclusive_done = threading.Event(), threading.Event(), []

    def reader() -> None:
        with lock.shared(), lock.shared():  # nested in one thread: no self-deadlock
            reading.set()
            release_reader.wait(5)

    thread = threading.Thread(target=reader)
    thread.start()
    assert reading.wait(5)

    def resizer() -> None:
        with lock.exclusive():
            exclusive_done.append(True)

    other = threading.Thread(target=resizer)
    other.start()
    other.join(0.1)
    assert exclusive_done == []  # still blocked by the reader
    release_reader.set()
    other.join(5)
    thread.join(5)
    assert exclusive_done == [True]
