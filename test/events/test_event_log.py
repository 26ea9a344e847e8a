"""The orchestrator's event log: idempotent appends, gap-free sequences, replay.

Every test of the interface runs against both backends (``log_backend``: LMDB files in a
tmp dir, a fresh database on a real PostgreSQL server); cross-process tests use real child
processes, so LMDB's writer lock or PostgreSQL's head-row lock is what keeps sequences
gap-free. Tests of one backend's own files or failure modes say so.
"""

from __future__ import annotations

import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet_idempotency.bringup.postgres import LocalPostgres
from fleet_idempotency.events import (
    EventLog,
    EventLogClosed,
    EventLogConfig,
    EventLogCorrupted,
    EventLogError,
    EventLogFull,
    EventLogReadOnly,
    EventLogSchemaMismatch,
    EventLogUnavailable,
    EventType,
    FleetEventRecord,
    FleetState,
    KeyView,
    LmdbEventLog,
    open_event_log,
    replay,
)
from fleet_idempotency.store import IdempotencyStore, State, StoreConfig

from support.event_log_support import LogBackend

CLIENT = "wms"
ROBOT = "amr-1"
STAMP = 1_700_000_000.0
KiB = 1024
MiB = 1024 * KiB


def make_log(path: Path, **overrides: Any) -> LmdbEventLog:
    """For the LMDB-only tests; the others take ``log_backend``."""
    return LmdbEventLog(EventLogConfig(path=path, **overrides))


def event(
    kind: EventType,
    key: str = "k-1",
    *,
    client: str = CLIENT,
    robot: str = ROBOT,
    disc: str = "",
    sequence: int = 0,
    **detail: Any,
) -> FleetEventRecord:
    return FleetEventRecord(
        event_type=kind,
        client_id=client,
        key=key,
        robot_id=robot,
        detail=detail,
        stamp=STAMP,
        discriminator=disc,
        sequence=sequence,
    )


def accepted(key: str = "k-1", *, disc: str = "", **overrides: Any) -> FleetEventRecord:
    detail: dict[str, Any] = {
        "robot_key": f"{CLIENT}/{key}",
        "command_type": "pick",
        "payload_json": "{}",
    }
    detail.update(overrides)
    return event(EventType.ACCEPTED, key, disc=disc, **detail)


def dispatched(key: str = "k-1", attempt: int = 1) -> FleetEventRecord:
    kind = EventType.DISPATCHED if attempt == 1 else EventType.RETRIED
    return event(kind, key, disc=str(attempt), attempt=attempt)


def result(key: str = "k-1", state: State = State.COMPLETED, code: int = 200) -> FleetEventRecord:
    body = json.dumps({"done": key})
    return event(EventType.RESULT, key, state=int(state), status_code=code, result_json=body)


def numbered(events: list[FleetEventRecord]) -> list[FleetEventRecord]:
    """Give events the sequences the log would assign, for replay tests without LMDB."""
    return [replace(e, sequence=i) for i, e in enumerate(events, start=1)]


# -- appending ------------------------------------------------------------------------------


def test_log_is_an_event_log(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        assert isinstance(log, EventLog)
        assert log.last_sequence() == 0
        assert list(log.read()) == []


def test_append_assigns_gap_free_increasing_sequences(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        stored = [log.append(accepted(f"k-{i}"))[0] for i in range(5)]
        stored += [pair[0] for pair in log.append_many(accepted(f"b-{i}") for i in range(5))]
        assert [e.sequence for e in stored] == list(range(1, 11))
        assert [e.sequence for e in log.read()] == list(range(1, 11))
        assert log.last_sequence() == 10
        assert log.append_many([]) == []


def test_duplicate_identity_appends_nothing_and_returns_the_stored_event(
    log_backend: LogBackend,
) -> None:
    with log_backend.open() as log:
        first, appended = log.append(accepted("k-1"))
        assert appended and first.sequence == 1
        # Same identity, different detail: the stored event wins, nothing is appended.
        again, appended = log.append(accepted("k-1", command_type="place"))
        assert not appended
        assert again == first and again.detail["command_type"] == "pick"
        assert log.last_sequence() == 1


def test_duplicates_inside_one_batch_are_deduplicated(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        log.append(accepted("old"))
        results = log.append_many([accepted("new"), accepted("old"), accepted("new")])
        assert [(e.key, e.sequence, now) for e, now in results] == [
            ("new", 2, True),
            ("old", 1, False),
            ("new", 2, False),
        ]
        assert log.last_sequence() == 2


def test_discriminator_tells_legitimate_repeats_apart(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        for attempt in (1, 2, 3, 2):
            log.append(dispatched("k-1", attempt))
        offline = [
            event(EventType.ROBOT_OFFLINE, "", client="", disc=f"{ROBOT}#{n}") for n in (1, 2, 1)
        ]
        log.append_many(offline)
        kinds = [(e.event_type, e.discriminator) for e in log.read()]
        assert kinds == [
            (EventType.DISPATCHED, "1"),
            (EventType.RETRIED, "2"),
            (EventType.RETRIED, "3"),
            (EventType.ROBOT_OFFLINE, f"{ROBOT}#1"),
            (EventType.ROBOT_OFFLINE, f"{ROBOT}#2"),
        ]


def test_events_survive_reopen_and_stay_deduplicated(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        log.append_many([accepted("k-1"), dispatched("k-1")])
    with log_backend.open() as log:
        stored, appended = log.append(accepted("k-1"))
        assert not appended and stored.sequence == 1
        assert log.append(result("k-1"))[0].sequence == 3
        assert [e.event_type for e in log.read()] == [
            EventType.ACCEPTED,
            EventType.DISPATCHED,
            EventType.RESULT,
        ]


def test_find_by_identity(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        log.append_many([accepted("k-1"), dispatched("k-1", 1), dispatched("k-1", 2)])
        found = log.find((CLIENT, "k-1", "retried", "2"))
        assert found is not None and found.sequence == 3
        assert log.find((CLIENT, "k-1", EventType.RETRIED, "2")) == found
        assert log.find((CLIENT, "k-1", "retried", "9")) is None
        assert log.find(("other", "k-1", "accepted", "")) is None


def test_events_for_returns_one_keys_events_in_order(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        log.append_many(
            [
                accepted("k"),
                accepted("k2"),  # "k" must not match "k2": the index prefix ends with NUL
                event(EventType.ACCEPTED, "k", client="wms2"),
                dispatched("k"),
                event(EventType.ROBOT_OFFLINE, "", client="", disc="1"),
                result("k"),
            ]
        )
        assert [e.sequence for e in log.events_for(CLIENT, "k")] == [1, 4, 6]
        assert [e.sequence for e in log.events_for("wms2", "k")] == [3]
        assert [e.sequence for e in log.events_for("", "")] == [5]
        assert log.events_for(CLIENT, "absent") == []


def test_read_after_and_limit_across_pages(log_backend: LogBackend) -> None:
    with log_backend.open(durable=False) as log:
        log.append_many(accepted(f"k-{i}") for i in range(1300))
        assert [e.sequence for e in log.read(after_sequence=100, limit=700)] == list(
            range(101, 801)
        )
        assert [e.sequence for e in log.read(after_sequence=1290)] == list(range(1291, 1301))
        assert len(list(log.read())) == 1300
        assert list(log.read(after_sequence=1300)) == []
        assert list(log.read(limit=0)) == []
        with pytest.raises(EventLogError, match="after_sequence"):
            log.read(after_sequence=-1)
        with pytest.raises(EventLogError, match="limit"):
            log.read(limit=-1)


def test_threads_appending_concurrently_get_a_gap_free_log(log_backend: LogBackend) -> None:
    with log_backend.open(durable=False) as log:
        start = threading.Barrier(8)

        def append_some(thread: int) -> None:
            start.wait(timeout=10)
            for i in range(50):
                log.append(accepted(f"k-{i % 25}"))  # half the identities are shared
                log.append(accepted(f"t{thread}-{i}"))

        threads = [threading.Thread(target=append_some, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        events = list(log.read())
        assert [e.sequence for e in events] == list(range(1, 25 + 8 * 50 + 1))
        assert len({e.identity for e in events}) == len(events)


# -- child processes ------------------------------------------------------------------------

_CHILD = r"""
import json, random, sys
from fleet_idempotency.events import EventLogConfig, EventType, FleetEventRecord, open_event_log

config, tag, count, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def accepted(key):
    return FleetEventRecord(EventType.ACCEPTED, "wms", key, "amr-1", {"n": 1}, 1.0)

log = open_event_log(EventLogConfig.model_validate_json(config))
print("ready", flush=True)
sys.stdin.readline()  # start signal: every child begins together
appended = []
order = list(range(count))
random.Random(tag).shuffle(order)  # racers meet on shared events whoever starts first
events = [e for i in order for e in (accepted(f"shared-{i}"), accepted(f"{tag}-{i}"))]
for first in range(0, len(events), batch):
    chunk = events[first : first + batch]
    for stored, now in [log.append(chunk[0])] if batch == 1 else log.append_many(chunk):
        if now:
            appended.append(stored.key)
        # Acknowledged only after append returned: what the parent is told is on disk.
        print(f"ack {stored.sequence}", flush=True)
log.close()
print("done " + json.dumps(appended), flush=True)
"""


class Child:
    """A child process appending to a log; its stdout lines are read with timeouts.

    It appends, in its own shuffled order, ``shared-<i>`` (which every child appends) and
    ``<tag>-<i>`` for i < count, ``batch`` events per transaction.
    """

    def __init__(
        self, tmp_path: Path, config: EventLogConfig, tag: str, count: int, batch: int = 1
    ) -> None:
        args = [config.model_dump_json(), tag, str(count), str(batch)]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=tmp_path,  # not the repo root: the installed package is imported
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())
        self.lines.put("")  # EOF

    def next_line(self, timeout_s: float = 20.0) -> str:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no line from the child within {timeout_s}s") from None
        if not line:
            raise AssertionError(f"child exited early with code {self.process.wait(10)}")
        return line

    def start(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def wait_for(self, prefix: str) -> str:
        while not (line := self.next_line()).startswith(prefix):
            pass
        return line


def race(children: list[Child], count: int, log: EventLog) -> None:
    """Start the children together; then the log must hold 1..N, each identity once."""
    for child in children:
        assert child.next_line() == "ready"
    for child in children:
        child.start()
    appended = [json.loads(child.wait_for("done ")[len("done ") :]) for child in children]
    for child in children:
        assert child.process.wait(20) == 0
    events = list(log.read())
    assert [e.sequence for e in events] == list(range(1, count + len(children) * count + 1))
    assert log.last_sequence() == len(events)
    assert len({e.identity for e in events}) == len(events)
    # Every shared identity was appended by exactly one process.
    winners = Counter(key for keys in appended for key in keys if key.startswith("shared-"))
    assert set(winners) == {f"shared-{i}" for i in range(count)} and set(winners.values()) == {1}
    assert sum(1 for keys in appended if any(k.startswith("shared-") for k in keys)) >= 2, (
        "the race was not a race: one process appended every shared event"
    )


def test_processes_appending_concurrently_get_a_gap_free_log(
    tmp_path: Path, log_backend: LogBackend
) -> None:
    if not log_backend.is_postgres:
        # PostgreSQL's schema is left to the racers: their first opens race too.
        log_backend.open().close()
    # Durable: each append waits for its fsync, so the racers overlap for long enough.
    config = log_backend.config(durable=True)
    children = [Child(tmp_path, config, f"p{n}", 60) for n in range(3)]
    with log_backend.open() as log:
        race(children, 60, log)


def test_two_processes_racing_on_postgres_with_batches_get_one_gap_free_log(
    tmp_path: Path, postgres_url: str
) -> None:
    # Single appends against batches of 7: transactions of different sizes interleave, and
    # a batch meets shared identities the other process stored a moment before.
    config = EventLogConfig(url=postgres_url)
    children = [Child(tmp_path, config, "single", 250), Child(tmp_path, config, "batch", 250, 7)]
    with open_event_log(config) as log:
        race(children, 250, log)


def test_append_is_durable_when_it_returns(tmp_path: Path, log_backend: LogBackend) -> None:
    child = Child(tmp_path, log_backend.config(durable=True), "p", 100_000)
    assert child.next_line() == "ready"
    child.start()
    acked = [int(child.wait_for("ack ").split()[1]) for _ in range(20)]
    # No close(), no atexit: only what was committed survives.
    os.kill(child.process.pid, signal.SIGKILL)
    child.process.wait(10)
    with log_backend.open() as log:
        events = list(log.read())
        assert max(acked) <= log.last_sequence() == len(events)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def test_map_grows_and_a_growth_by_another_process_is_adopted(tmp_path: Path) -> None:
    # LMDB only: the memory map is LMDB's.
    path = tmp_path / "log"
    small = {"map_size_initial": 64 * KiB, "map_size_max": 64 * MiB, "durable": False}
    with make_log(path, **small) as log:
        log.append_many(event(EventType.ACCEPTED, f"k-{i}", pad="x" * 2000) for i in range(50))
        assert log.stats()["resizes"] > 0
        size_before = log.map_size()
        # Another process appends far more: it grows the map beyond what this one mapped.
        child = Child(tmp_path, EventLogConfig(path=path, **small), "p", 3000)
        assert child.next_line() == "ready"
        child.start()
        child.wait_for("done ")
        assert child.process.wait(20) == 0
        assert log.last_sequence() == 50 + 6000  # the read adopted the new size
        assert log.map_size() > size_before
        stored, appended = log.append(accepted("after-growth"))
        assert appended and stored.sequence == 6051


def test_full_log_refuses_appends_and_keeps_what_it_has(tmp_path: Path) -> None:
    # LMDB only: map_size_max is LMDB's ceiling; PostgreSQL's is the disk.
    with make_log(
        tmp_path / "log", map_size_initial=128 * KiB, map_size_max=256 * KiB, durable=False
    ) as log:
        with pytest.raises(EventLogFull, match="map_size_max"):
            for i in range(10_000):
                log.append(event(EventType.ACCEPTED, f"k-{i}", pad="x" * 1000))
        kept = log.last_sequence()
        assert kept > 0
        assert [e.sequence for e in log.read()] == list(range(1, kept + 1))
        with pytest.raises(EventLogFull):
            log.append_many(event(EventType.ACCEPTED, f"b-{i}", pad="x" * 1000) for i in range(50))
        assert log.last_sequence() == kept


# -- refusals -------------------------------------------------------------------------------


class NotJson:
    pass


@pytest.mark.parametrize(
    ("detail", "names"),
    [
        ({"slot": ("A", 1)}, "tuple"),
        ({"slots": {"A1"}}, "set"),
        ({"thing": NotJson()}, "NotJson"),
        ({"x": math.nan}, "nan"),
        ({"x": [1, {"y": math.inf}]}, "inf"),
        ({1: "int key"}, "non-string key"),
        ({"deep": [{"ok": 1}, {2: "bad"}]}, r"detail\['deep'\]\[1\]"),
    ],
)
def test_non_json_detail_is_refused_and_nothing_is_appended(
    log_backend: LogBackend, detail: dict[Any, Any], names: str
) -> None:
    with log_backend.open() as log:
        bad = replace(accepted("bad"), detail=detail)
        with pytest.raises(EventLogError, match=names):
            log.append(bad)
        with pytest.raises(EventLogError, match=names):
            log.append_many([accepted("good"), bad])  # all or nothing
        assert log.last_sequence() == 0 and log.find((CLIENT, "good", "accepted", "")) is None


def test_detail_must_be_a_json_object() -> None:
    with pytest.raises(EventLogError, match="JSON object"):
        replace(accepted(), detail=["not", "an", "object"])  # type: ignore[arg-type]


def test_fields_the_index_cannot_hold_are_refused(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        with pytest.raises(EventLogError, match="NUL"):
            log.append(accepted("a\x00b"))
        with pytest.raises(EventLogError, match="robot_id must not contain a NUL"):
            log.append(event(EventType.ACCEPTED, robot="amr\x00"))
        with pytest.raises(EventLogError, match="too long"):
            log.append(accepted("k" * 600))
        assert log.last_sequence() == 0


def test_malformed_records_are_refused_at_construction() -> None:
    with pytest.raises(EventLogError, match="unknown event type"):
        event("exploded")  # type: ignore[arg-type]
    with pytest.raises(EventLogError, match="stamp"):
        replace(accepted(), stamp=math.nan)
    with pytest.raises(EventLogError, match="key must be a str"):
        replace(accepted(), key=7)  # type: ignore[arg-type]
    with pytest.raises(EventLogError, match="sequence"):
        replace(accepted(), sequence=-1)
    with pytest.raises(EventLogError, match="missing the field"):
        FleetEventRecord.from_dict({"event_type": "accepted"})


def test_to_dict_round_trips_through_json() -> None:
    original = replace(result("k-9"), sequence=42, discriminator="x")
    assert original.identity == (CLIENT, "k-9", "result", "x")
    assert FleetEventRecord.from_dict(json.loads(json.dumps(original.to_dict()))) == original
    assert FleetEventRecord.from_dict(original.to_dict()).event_type is EventType.RESULT


def test_a_file_that_is_not_lmdb_is_refused_clearly(tmp_path: Path) -> None:
    # LMDB only: damaged or missing files; PostgreSQL's counterparts follow below.
    path = tmp_path / "log"
    path.mkdir()
    (path / "data.mdb").write_bytes(b"this is not an LMDB file" * 400)
    with pytest.raises(EventLogCorrupted, match="does not hold a readable LMDB event log"):
        make_log(path)
    (tmp_path / "plain").write_text("hello")
    with pytest.raises(EventLogCorrupted, match="is a file"):
        make_log(tmp_path / "plain")
    with pytest.raises(EventLogError, match="no event log"):
        LmdbEventLog(EventLogConfig(path=tmp_path / "absent"), readonly=True)


def test_an_idempotency_store_is_not_an_event_log(tmp_path: Path) -> None:
    # LMDB only: the store's PostgreSQL tables are another team's (a schema of their own).
    IdempotencyStore.open(StoreConfig(path=tmp_path / "store")).close()
    with pytest.raises(EventLogCorrupted, match="not a fleet_idempotency event log"):
        make_log(tmp_path / "store")
    with pytest.raises(EventLogCorrupted, match="not a fleet_idempotency event log"):
        LmdbEventLog(EventLogConfig(path=tmp_path / "store"), readonly=True)


def test_other_lmdb_data_is_not_an_event_log(tmp_path: Path) -> None:
    # LMDB only: foreign sub-databases; foreign PostgreSQL tables are tested below.
    env = lmdb.open(str(tmp_path / "other"), max_dbs=2)
    with env.begin(write=True) as txn:
        txn.put(b"hello", b"world")
    env.close()
    with pytest.raises(EventLogCorrupted, match="sub-databases found"):
        make_log(tmp_path / "other")


def test_another_schema_version_is_refused(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        log.append(accepted())
    log_backend.rewrite_meta("schema_version", "99")
    with pytest.raises(EventLogSchemaMismatch, match="schema version 99"):
        log_backend.open()
    log_backend.rewrite_meta("schema_version", "1")
    log_backend.rewrite_meta("format", None)
    with pytest.raises(EventLogCorrupted, match="format marker"):
        log_backend.open()


def test_an_undecodable_event_is_reported_not_guessed(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        log.append_many([accepted("k-1"), accepted("k-2")])
    log_backend.damage_event(2)
    with log_backend.open() as log:
        assert log.find((CLIENT, "k-1", "accepted", "")) is not None
        with pytest.raises(EventLogCorrupted, match="event 2 cannot be decoded"):
            list(log.read())
        with pytest.raises(EventLogCorrupted, match="event 2"):
            log.append(accepted("k-2"))  # the duplicate's stored event is read back


def test_read_only_and_closed_logs_refuse_use(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        log.append(accepted())
    reader = log_backend.open(readonly=True)
    assert [e.key for e in reader.read()] == ["k-1"]
    with pytest.raises(EventLogReadOnly):
        reader.append(accepted("k-2"))
    with pytest.raises(EventLogReadOnly):
        reader.append_many([accepted("k-2")])
    reader.close()
    reader.close()  # idempotent
    with pytest.raises(EventLogClosed):
        reader.last_sequence()
    with pytest.raises(EventLogClosed):
        list(reader.read())
    writer = log_backend.open()
    writer.close()
    for call in (
        lambda: writer.append(accepted("k-3")),
        lambda: writer.find((CLIENT, "k-1", "accepted", "")),
        lambda: writer.events_for(CLIENT, "k-1"),
    ):
        with pytest.raises(EventLogClosed):
            call()


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="must not exceed"):
        EventLogConfig(path=Path("x"), map_size_initial=2 * MiB, map_size_max=MiB)
    with pytest.raises(ValueError, match="extra"):
        EventLogConfig(path=Path("x"), sync=False)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="exactly one of path"):
        EventLogConfig()
    with pytest.raises(ValueError, match="exactly one of path"):
        EventLogConfig(path=Path("x"), url="postgresql://db/fleet")
    with pytest.raises(ValueError, match="must start with postgresql://"):
        EventLogConfig(url="mysql://db/fleet")
    with pytest.raises(ValueError, match="pg_schema"):
        EventLogConfig(url="postgresql://db/fleet", pg_schema='x"; DROP TABLE y; --')
    assert EventLogConfig(url="postgresql://db/fleet").path is None


# -- PostgreSQL's own ---------------------------------------------------------------------


def test_postgres_schemas_hold_separate_logs_and_foreign_tables_are_refused(
    postgres_url: str,
) -> None:
    with pytest.raises(EventLogError, match="no event log in schema fleet_idem_events"):
        open_event_log(EventLogConfig(url=postgres_url), readonly=True)
    with (
        open_event_log(EventLogConfig(url=postgres_url)) as first,
        open_event_log(EventLogConfig(url=postgres_url, pg_schema="replica_b")) as second,
    ):
        first.append_many([accepted("a"), accepted("b")])
        assert second.append(accepted("a"))[0].sequence == 1  # a log of its own
        assert first.last_sequence() == 2 and second.last_sequence() == 1
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE SCHEMA keys")
        connection.execute("CREATE TABLE keys.events (id integer)")
    with pytest.raises(EventLogCorrupted, match="holds events but is not a fleet_idempotency"):
        open_event_log(EventLogConfig(url=postgres_url, pg_schema="keys"))


def test_postgres_a_rolled_back_append_leaves_no_gap(postgres_url: str) -> None:
    with open_event_log(EventLogConfig(url=postgres_url)) as log:
        log.append(accepted("before"))
        # The database itself refuses one event: the batch fails after the head row was
        # locked and its first events inserted, so the rollback must give their numbers back.
        LogBackend("postgres", postgres_url).sql(
            "CREATE FUNCTION fleet_idem_events.refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN IF NEW.key = 'poison' THEN RAISE EXCEPTION 'refused by a trigger'; "
            "END IF; RETURN NEW; END $$; "
            "CREATE TRIGGER refuse BEFORE INSERT ON fleet_idem_events.events "
            "FOR EACH ROW EXECUTE FUNCTION fleet_idem_events.refuse()"
        )
        with pytest.raises(EventLogError, match="refused by a trigger") as refused:
            log.append_many([accepted("x"), accepted("y"), accepted("poison")])
        assert not isinstance(refused.value, EventLogUnavailable)
        assert log.last_sequence() == 1 and log.find((CLIENT, "x", "accepted", "")) is None
        stored, appended = log.append(accepted("after"))
        assert appended and stored.sequence == 2
        assert [e.key for e in log.read()] == ["before", "after"]


def test_postgres_appends_wait_for_the_head_lock_but_stored_events_do_not(
    postgres_url: str,
) -> None:
    import psycopg

    with open_event_log(EventLogConfig(url=postgres_url)) as log:
        log.append(accepted("stored"))
        with psycopg.connect(postgres_url) as other, other.transaction():
            # Another appender, mid-transaction, holds the head row.
            other.execute("SELECT last_sequence FROM fleet_idem_events.events_head FOR UPDATE")
            assert log.append(accepted("stored")) == (
                replace(accepted("stored"), sequence=1),
                False,
            )
            outcome: queue.Queue[tuple[FleetEventRecord, bool]] = queue.Queue()
            waiter = threading.Thread(target=lambda: outcome.put(log.append(accepted("new"))))
            waiter.start()
            with pytest.raises(queue.Empty):
                outcome.get(timeout=0.5)  # serialised behind the other appender
        stored, appended = outcome.get(timeout=10)
        waiter.join(10)
        assert appended and stored.sequence == 2


def test_postgres_unreachable_is_a_clear_error_and_the_log_recovers(
    postgres_server: LocalPostgres, postgres_url: str
) -> None:
    config = EventLogConfig(url=postgres_url, pg_connect_timeout_s=1.0)
    with open_event_log(config) as log:
        log.append(accepted("before"))
        # A crash, not a clean shutdown: only what was committed (synchronous_commit on)
        # may survive.
        postgres_server.stop("immediate")
        try:
            for call in (
                lambda: log.append(accepted("during")),
                log.last_sequence,
                lambda: list(log.read()),
            ):
                with pytest.raises(EventLogUnavailable, match="unavailable"):
                    call()
            with pytest.raises(EventLogUnavailable, match="unavailable"):
                open_event_log(config)
        finally:
            postgres_server.restart()  # same port: the URL stays valid
        deadline = time.monotonic() + 30
        while True:  # the pool reconnects in the background, with backoff
            try:
                assert log.last_sequence() == 1
                break
            except EventLogUnavailable:
                assert time.monotonic() < deadline, "the log did not come back"
                time.sleep(0.2)
        stored, appended = log.append(accepted("after"))
        assert appended and stored.sequence == 2
        assert log.append(accepted("before"))[1] is False


# -- replay ---------------------------------------------------------------------------------


def view(state: FleetState, key: str = "k-1") -> KeyView:
    return state.keys[(CLIENT, key)]


def test_accepted_creates_the_view() -> None:
    state = replay(numbered([accepted("k-1", payload_json='{"slot": "A1"}')]))
    assert view(state) == KeyView(
        client_id=CLIENT,
        key="k-1",
        robot_id=ROBOT,
        command_type="pick",
        robot_key=f"{CLIENT}/k-1",
        payload_json='{"slot": "A1"}',
        state=State.ACCEPTED,
        status_code=0,
        result_json="",
        attempts=0,
        last_sequence=1,
    )
    assert [v.key for v in state.in_flight()] == ["k-1"] and state.final() == []


def test_dispatch_and_retries_move_to_in_progress_counting_attempts() -> None:
    state = replay(numbered([accepted(), dispatched(attempt=1), dispatched(attempt=3)]))
    assert view(state).state == State.IN_PROGRESS and view(state).attempts == 3
    # A late, lower attempt never lowers the count.
    state.apply(replace(dispatched(attempt=2), sequence=4))
    assert view(state).attempts == 3 and view(state).last_sequence == 4


@pytest.mark.parametrize("final", [State.COMPLETED, State.FAILED, State.INTERRUPTED])
def test_a_final_result_sets_state_code_and_body(final: State) -> None:
    state = replay(numbered([accepted(), dispatched(), result(state=final, code=201)]))
    assert (view(state).state, view(state).status_code) == (final, 201)
    assert view(state).result_json == '{"done": "k-1"}'
    assert [v.key for v in state.final()] == ["k-1"] and state.in_flight() == []


def test_a_non_final_result_changes_nothing() -> None:
    events = [accepted(), dispatched(), result(state=State.IN_PROGRESS, code=409)]
    assert view(replay(numbered(events))).state == State.IN_PROGRESS


def test_interrupted_busy_and_rejected_transitions() -> None:
    interrupted = replay(numbered([accepted(), dispatched(), event(EventType.INTERRUPTED)]))
    assert (view(interrupted).state, view(interrupted).status_code) == (State.INTERRUPTED, 500)
    busy = replay(numbered([accepted(), dispatched(), event(EventType.BUSY, disc="1")]))
    assert view(busy).state == State.ACCEPTED and view(busy).attempts == 1
    rejected = replay(
        numbered([accepted(), dispatched(), event(EventType.REJECTED, status_code=400)])
    )
    assert (view(rejected).state, view(rejected).status_code) == (State.REJECTED, 400)
    assert rejected.in_flight() == [] and rejected.final() == []


def test_rejected_then_accepted_again_starts_afresh_at_the_back_of_the_queue() -> None:
    state = replay(
        numbered(
            [
                accepted("k-1"),
                dispatched("k-1", 2),
                event(EventType.REJECTED, "k-1", status_code=429),
                accepted("k-2"),
                accepted("k-1", disc="2", command_type="place"),
            ]
        )
    )
    again = view(state, "k-1")
    assert (again.state, again.attempts, again.command_type) == (State.ACCEPTED, 0, "place")
    assert [v.key for v in state.in_flight()] == ["k-2", "k-1"]


def test_a_second_accepted_of_a_live_key_changes_nothing() -> None:
    state = replay(numbered([accepted(), dispatched(), accepted(disc="again")]))
    assert view(state).state == State.IN_PROGRESS and view(state).attempts == 1


def test_expired_ends_a_final_or_released_key_and_accepted_restarts_it() -> None:
    state = replay(
        numbered(
            [
                accepted("done"),
                result("done", code=201),
                event(EventType.EXPIRED, "done", expired_at=STAMP),
                accepted("sent"),
                dispatched("sent"),
                # The robot answered 410 for a dispatched key: the orchestrator released it.
                event(EventType.EXPIRED, "sent", disc="1", status_code=410),
            ]
        )
    )
    assert (view(state, "done").state, view(state, "done").status_code) == (State.EXPIRED, 201)
    assert (view(state, "sent").state, view(state, "sent").status_code) == (State.EXPIRED, 410)
    assert state.in_flight() == [] and state.final() == []
    state.apply(replace(accepted("sent", disc="2"), sequence=7))
    assert view(state, "sent").state == State.ACCEPTED and view(state, "sent").attempts == 0


@pytest.mark.parametrize(
    "late",
    [
        result(state=State.FAILED, code=500),
        dispatched(attempt=2),
        event(EventType.BUSY),
        event(EventType.REJECTED, status_code=429),
        event(EventType.INTERRUPTED),
        accepted(disc="again"),
    ],
    ids=lambda e: e.event_type.value,
)
def test_a_final_state_is_never_overwritten(late: FleetEventRecord) -> None:
    state = replay(numbered([accepted(), dispatched(), result(code=200), late]))
    assert (view(state).state, view(state).status_code) == (State.COMPLETED, 200)
    assert view(state).last_sequence == 3


def test_counted_only_events_and_orphans() -> None:
    state = replay(
        numbered(
            [
                accepted(),
                event(EventType.DUPLICATE_SUPPRESSED, disc="1"),
                event(EventType.MISMATCH_REJECTED, disc="1"),
                event(EventType.RESULT_IGNORED, "never-sent", state=3),
                event(EventType.ROBOT_OFFLINE, "", client="", disc="1"),
                event(EventType.ROBOT_ONLINE, "", client="", disc="1"),
            ]
        )
    )
    assert view(state).state == State.ACCEPTED and view(state).last_sequence == 1
    assert state.counts == {
        "accepted": 1,
        "duplicate_suppressed": 1,
        "mismatch_rejected": 1,
        "result_ignored": 1,
        "robot_offline": 1,
        "robot_online": 1,
    }
    assert state.orphan_events == 1 and list(state.keys) == [(CLIENT, "k-1")]


def test_events_out_of_order_are_refused() -> None:
    with pytest.raises(EventLogError, match="sequence order"):
        replay([replace(accepted("a"), sequence=2), replace(accepted("b"), sequence=1)])


def test_summary_is_json_with_counts_per_state_and_type() -> None:
    state = replay(numbered([accepted("a"), accepted("b"), dispatched("b"), result("b")]))
    summary = json.loads(json.dumps(state.summary()))
    assert summary["last_sequence"] == 4 and summary["keys"] == 2 and summary["in_flight"] == 1
    assert summary["states"]["accepted"] == 1 and summary["states"]["completed"] == 1
    assert summary["states"]["failed"] == 0
    assert summary["events"]["accepted"] == 2 and summary["events"]["expired"] == 0


SCENARIO = [
    accepted("a"),
    accepted("b"),
    dispatched("a"),
    dispatched("a", 2),
    event(EventType.BUSY, "b", disc="1"),
    result("a"),
    event(EventType.DUPLICATE_SUPPRESSED, "a", disc="1"),
    event(EventType.REJECTED, "b", status_code=429),
    accepted("b", disc="2"),
    dispatched("b"),
]


def test_replaying_an_export_equals_replaying_the_log(log_backend: LogBackend) -> None:
    with log_backend.open() as log:
        log.append_many(SCENARIO)
        log.append_many(SCENARIO)  # a replayed batch appends nothing
        exported = [json.dumps(e.to_dict()) for e in log.read()]
        from_log = replay(log.read())
    from_export = replay(FleetEventRecord.from_dict(json.loads(line)) for line in exported)
    with log_backend.open(readonly=True) as reopened:
        assert from_export == from_log == replay(reopened.read())
    assert from_log.last_sequence == len(SCENARIO)
    assert view(from_log, "a").state == State.COMPLETED
    assert view(from_log, "b").state == State.IN_PROGRESS


def test_replay_from_postgres_equals_replay_from_lmdb(tmp_path: Path, postgres_url: str) -> None:
    # The same appends, one by one and in batches with duplicates, into both backends.
    logs = [
        open_event_log(EventLogConfig(path=tmp_path / "log")),
        open_event_log(EventLogConfig(url=postgres_url)),
    ]
    for log in logs:
        with log:
            for e in SCENARIO[:4]:
                log.append(e)
            log.append_many(SCENARIO)
            log.append_many([*SCENARIO[4:], result("b", State.FAILED, 500), *SCENARIO[:2]])
    lmdb_events, postgres_events = (list(log_events(config)) for config in (
        EventLogConfig(path=tmp_path / "log"), EventLogConfig(url=postgres_url)
    ))  # fmt: skip
    assert postgres_events == lmdb_events and len(lmdb_events) == len(SCENARIO) + 1
    assert replay(postgres_events) == replay(lmdb_events)
    assert view(replay(postgres_events), "b").state == State.FAILED


def log_events(config: EventLogConfig) -> list[FleetEventRecord]:
    with open_event_log(config, readonly=True) as log:
        return list(log.read())


_KEYS = st.sampled_from([(CLIENT, "k-1"), (CLIENT, "k-2"), ("other", "k-1")])


@st.composite
def any_event(draw: st.DrawFn) -> FleetEventRecord:
    client, key = draw(_KEYS)
    kind = draw(st.sampled_from(list(EventType)))
    detail: dict[str, Any] = {
        "robot_key": key,
        "command_type": draw(st.sampled_from(["pick", "place"])),
        "payload_json": "{}",
        "attempt": draw(st.integers(0, 5)),
        "state": draw(st.integers(0, 8)),
        "status_code": draw(st.sampled_from([200, 409, 429, 500])),
        "result_json": draw(st.sampled_from(["", '{"ok": true}', '{"ok": false}'])),
    }
    disc = draw(st.sampled_from(["", "1", "2"]))
    return FleetEventRecord(kind, client, key, ROBOT, detail, STAMP, disc)


@settings(max_examples=300, deadline=None)
@given(st.lists(any_event(), max_size=40))
def test_a_final_key_only_ever_leaves_its_result_by_expiring(
    events: list[FleetEventRecord],
) -> None:
    state = FleetState()
    for next_event in numbered(events):
        before = dict(state.keys)
        state.apply(next_event)
        for key_id, old in before.items():
            if old.state.is_final:
                new = state.keys[key_id]
                assert new.state == State.EXPIRED or new == old, (old, next_event, new)
    assert replay(numbered(events)) == state  # deterministic, and apply == replay
