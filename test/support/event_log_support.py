"""The event-log tests run once per backend: LMDB in a tmp dir, PostgreSQL in a fresh database.

``log_backend`` is parametrised (ids ``lmdb`` and ``postgres``); a test opens its log with
``log_backend.open()`` and reaches past the interface only through the few helpers here
that damage a log on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.events import EventLog, EventLogConfig, open_event_log

# Sizes of an LMDB map mean nothing to PostgreSQL; a test may pass them to either backend.
_LMDB_ONLY = ("map_size_initial", "map_size_max")


@dataclass(frozen=True)
class LogBackend:
    name: str  # "lmdb" or "postgres"
    # Where the log is: an LMDB directory or a postgresql:// URL.
    where: str

    @property
    def is_postgres(self) -> bool:
        return self.name == "postgres"

    def config(self, **overrides: Any) -> EventLogConfig:
        if self.is_postgres:
            settings = {k: v for k, v in overrides.items() if k not in _LMDB_ONLY}
            return EventLogConfig(url=self.where, **settings)
        return EventLogConfig(path=Path(self.where), **overrides)

    def open(self, readonly: bool = False, **overrides: Any) -> EventLog:
        return open_event_log(self.config(**overrides), readonly=readonly)

    def sql(self, statement: str, *params: object) -> None:
        """Run one statement against the log's database (PostgreSQL only)."""
        import psycopg

        assert self.is_postgres
        with psycopg.connect(self.where, autocommit=True) as connection:
            connection.execute(statement.encode(), params or None)

    def rewrite_meta(self, name: str, value: str | None) -> None:
        """Change (None: delete) one format/schema entry, as a foreign writer would."""
        if self.is_postgres:
            if value is None:
                self.sql("DELETE FROM fleet_idem_events.events_meta WHERE name = %s", name)
            else:
                self.sql(
                    "UPDATE fleet_idem_events.events_meta SET value = %s WHERE name = %s",
                    value,
                    name,
                )
            return
        import lmdb

        env = lmdb.open(self.where, max_dbs=8)
        meta = env.open_db(b"meta")
        with env.begin(write=True) as txn:
            if value is None:
                txn.delete(name.encode(), db=meta)
            else:
                txn.put(name.encode(), value.encode(), db=meta)
        env.close()

    def damage_event(self, sequence: int) -> None:
        """Make one stored event undecodable."""
        if self.is_postgres:
            self.sql(
                "UPDATE fleet_idem_events.events SET detail = '[1]' WHERE sequence = %s", sequence
            )
            return
        import lmdb

        env = lmdb.open(self.where, max_dbs=8)
        with env.begin(write=True) as txn:
            events = env.open_db(b"events", txn=txn)
            txn.put(sequence.to_bytes(8, "big"), b'["accepted"]', db=events)
        env.close()


@pytest.fixture(params=["lmdb", "postgres"])
def log_backend(request: pytest.FixtureRequest, tmp_path: Path) -> LogBackend:
    if request.param == "lmdb":
        return LogBackend("lmdb", str(tmp_path / "log"))
    return LogBackend("postgres", request.getfixturevalue("postgres_url"))
