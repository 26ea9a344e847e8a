"""The LMDB environment the store and the event log share: each refuses the other's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_idempotency.events import EventLogClosed, EventLogConfig, EventLogCorrupted, LmdbEventLog
from fleet_idempotency.store import IdempotencyStore, StoreClosed, StoreCorrupted
from fleet_idempotency.store.persistence.lmdb_backend import LmdbBackend
from fleet_idempotency.store.persistence.lmdb_env import LmdbEnvironment

from support.store_support import claim_args, make_config


def test_a_store_directory_is_not_an_event_log(tmp_path: Path) -> None:
    with IdempotencyStore.open(make_config(tmp_path / "keys")) as store:
        store.claim(**claim_args("k-1", slot="A1"))
    with pytest.raises(EventLogCorrupted, match="not a fleet_idempotency event log"):
        LmdbEventLog(EventLogConfig(path=tmp_path / "keys"))


def test_an_event_log_directory_is_not_a_store(tmp_path: Path) -> None:
    LmdbEventLog(EventLogConfig(path=tmp_path / "events")).close()
    with pytest.raises(StoreCorrupted, match="not a fleet_idempotency store"):
        IdempotencyStore.open(make_config(tmp_path / "events"))


def test_each_kind_names_itself_when_used_after_close(tmp_path: Path) -> None:
    log = LmdbEventLog(EventLogConfig(path=tmp_path / "events"))
    log.close()
    with pytest.raises(EventLogClosed, match=r"the event log at .* is closed"):
        log.last_sequence()
    backend = LmdbBackend(
        tmp_path / "keys",
        map_size_initial=1 << 20,
        map_size_max=1 << 22,
        durable=False,
        metasync=False,
    )
    backend.close()
    with pytest.raises(StoreClosed, match=r"the store at .* is closed"):
        backend.map_size()


def test_a_write_that_does_not_fit_grows_the_map_and_is_applied_once(tmp_path: Path) -> None:
    backend = LmdbBackend(
        tmp_path / "keys",
        map_size_initial=64 << 10,
        map_size_max=8 << 20,
        durable=False,
        metasync=False,
    )
    env: LmdbEnvironment = backend.env
    calls = 0

    def write_large(txn: object) -> int:
        nonlocal calls
        calls += 1
        for index in range(200):
            txn.put(f"big-{index}".encode(), b"x" * 2048, db=env.dbs[b"meta"])  # type: ignore[attr-defined]
        return calls

    try:
        env.run_write(write_large)
        assert env.resizes >= 1
        # Each attempt that did not fit was aborted whole; only the last one committed.
        assert env.run_read(lambda txn: txn.stat(env.dbs[b"meta"])["entries"]) == 2 + 200
    finally:
        backend.close()
