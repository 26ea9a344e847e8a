"""PostgreSQL implementation of the event log, shared by several orchestrator replicas.

Three tables in one schema (``EventLogConfig.pg_schema``, default ``fleet_idem_events``):

- ``events``       one row per event; primary key ``sequence``; a unique constraint on the
                   identity (client_id, key, event_type, discriminator); an index on
                   (client_id, key, sequence) for ``events_for``;
- ``events_head``  one row: the last sequence handed out;
- ``events_meta``  format marker and schema version, as in the LMDB log.

The table names carry an ``events`` prefix so that the schema may also hold the key store.

Why a head row and not a SEQUENCE: ``nextval`` is not transactional, so every rolled-back
append (a bad event in a batch, a lost connection, a crash before commit) would leave a
hole, and concurrent appenders would commit out of order: a reader that has seen 7 and
asks for ``read(after=7)`` would never see 6 committed a moment later. Instead each
appending transaction locks the head row (``SELECT ... FOR UPDATE``), takes the next
numbers, inserts, moves the head and commits; the lock is held until the commit, so
appenders are serialised, numbers are handed out in commit order and a rollback returns
them. The price is one appending transaction at a time across all replicas (about one
WAL flush per commit): put what belongs together into one ``append_many``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed

from .base import EventLog, read_in_pages
from .codec import FORMAT_MARKER, SCHEMA_VERSION, check_appendable
from .config import EventLogConfig
from .model import (
    EventLogClosed,
    EventLogCorrupted,
    EventLogError,
    EventLogReadOnly,
    EventLogSchemaMismatch,
    EventLogUnavailable,
    FleetEventRecord,
    Identity,
)

Connection = psycopg.Connection[tuple[Any, ...]]

# Longer pages than LMDB's: each page is a network round trip here.
_READ_PAGE = 1024
_IDLE_IN_TRANSACTION_S = 60
_FORMAT = FORMAT_MARKER.decode()
_COLUMNS = "sequence, event_type, client_id, key, robot_id, discriminator, stamp, detail::text"
_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def describe(url: str, schema: str) -> str:
    """Where the log is, for messages: never the password a URL may carry."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.Error:
        return f"schema {schema} of an unparsable PostgreSQL URL"
    host = parts.get("host") or parts.get("hostaddr") or "localhost"
    port = parts.get("port") or 5432
    return f"schema {schema} of postgresql://{host}:{port}/{parts.get('dbname') or ''}"


class PostgresEventLog(EventLog):
    """An append-only event log in one PostgreSQL schema.

    Any number of processes may open the same schema; each shares one instance between
    its threads (the instance holds a connection pool). A connection failure raises
    ``EventLogUnavailable``; the pool reconnects by itself, so the same instance works
    again once the database is back.
    """

    def __init__(self, config: EventLogConfig, *, readonly: bool = False) -> None:
        if config.url is None:
            raise EventLogError("a PostgreSQL event log needs config.url")
        self.readonly = readonly
        self.where = describe(config.url, config.pg_schema)
        self._timeout = config.pg_connect_timeout_s
        self._closed = False
        # Our transactions last milliseconds; a frozen process (SIGSTOP, a hung host) in the
        # middle of an append would otherwise hold the head row, and every replica's
        # appends with it, until its TCP connection is finally torn down.
        options = [f"-c idle_in_transaction_session_timeout={_IDLE_IN_TRANSACTION_S}s"]
        if not config.durable:
            # The commit returns before its WAL flush: a server crash may lose the last
            # appends (never reorder or corrupt them). Tests and simulations only.
            options.append("-c synchronous_commit=off")
        if readonly:
            # Enforced by the server, not only by this class: the operator tool can never
            # write, whatever it calls.
            options.append("-c default_transaction_read_only=on")
        self._connect_kwargs: dict[str, Any] = {
            "application_name": "fleet_idem_events",
            "connect_timeout": max(1, round(self._timeout)),
        }
        self._connect_kwargs["options"] = " ".join(options)
        self._names = _Names(config.pg_schema)
        # The schema is checked (or created) on a connection of its own, before the pool
        # exists: an unreachable database fails here at once with libpq's own reason,
        # instead of a pool timeout after pg_connect_timeout_s.
        try:
            with psycopg.connect(config.url, **self._connect_kwargs) as conn:
                self._prepare(conn)
        except psycopg.OperationalError as exc:
            raise EventLogUnavailable(f"event log at {self.where} unavailable: {exc}") from exc
        except psycopg.Error as exc:
            raise EventLogError(f"cannot open the event log at {self.where}: {exc}") from exc
        self._pool: ConnectionPool[Connection] = ConnectionPool(
            config.url,
            kwargs=self._connect_kwargs,
            min_size=1,
            max_size=config.pg_pool_size,
            timeout=self._timeout,
            # A pooled connection may have died with a server restart: checking it before
            # use costs a round trip, and lets a call after the restart succeed instead of
            # failing on the stale connection.
            check=ConnectionPool.check_connection,
            name="fleet_idem_events",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=self._timeout)
        except psycopg.OperationalError as exc:
            self._pool.close()
            raise EventLogUnavailable(f"event log at {self.where} unavailable: {exc}") from exc

    # -- schema ----------------------------------------------------------------------------

    def _prepare(self, conn: Connection) -> None:
        names = self._names
        with conn.transaction():
            if not self.readonly:
                # Two replicas starting at once would both run CREATE ... IF NOT EXISTS and
                # one would fail on the catalog's unique index; the lock makes them take turns.
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"fleet_idempotency.event_log:{names.schema}",),
                )
            found = {
                table
                for table in ("events", "events_head", "events_meta")
                if conn.execute(
                    "SELECT to_regclass(%s) IS NOT NULL", (f"{names.schema}.{table}",)
                ).fetchone()
                == (True,)
            }
            if "events_meta" in found:
                self._check_meta(conn)
                return
            if found:
                raise EventLogCorrupted(
                    f"{self.where} holds {', '.join(sorted(found))} but is not a "
                    "fleet_idempotency event log (format marker missing)"
                )
            if self.readonly:
                raise EventLogError(f"no event log in {self.where}")
            for statement in names.create_statements():
                conn.execute(statement)
            conn.execute(
                sql.SQL("INSERT INTO {} (name, value) VALUES (%s, %s), (%s, %s)").format(
                    names.meta
                ),
                ("format", _FORMAT, "schema_version", str(SCHEMA_VERSION)),
            )
            conn.execute(sql.SQL("INSERT INTO {} VALUES (true, 0)").format(names.head))

    def _check_meta(self, conn: Connection) -> None:
        names = self._names
        meta: dict[str, str] = dict(
            conn.execute(sql.SQL("SELECT name, value FROM {}").format(names.meta))
        )
        head = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(names.head)).fetchone()
        if meta.get("format") != _FORMAT or "schema_version" not in meta or head != (1,):
            raise EventLogCorrupted(
                f"{self.where} is not a fleet_idempotency event log (format marker missing)"
            )
        if meta["schema_version"] != str(SCHEMA_VERSION):
            raise EventLogSchemaMismatch(
                f"{self.where} was written with event log schema version "
                f"{meta['schema_version']}; this code reads version {SCHEMA_VERSION}. Use the "
                "matching release or migrate the event log."
            )

    # -- connections -----------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A pooled connection in a transaction (committed on success), errors translated."""
        if self._closed:
            raise EventLogClosed(f"the event log at {self.where} is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolClosed:
            raise EventLogClosed(f"the event log at {self.where} is closed") from None
        except psycopg.OperationalError as exc:
            # Includes the pool's timeout while the server is down and a connection killed
            # by a restart mid-call. A commit cut off this way may or may not have landed:
            # appending the same events again is safe, their identities deduplicate them.
            raise EventLogUnavailable(
                f"event log at {self.where} unavailable: {exc} (is the database running?)"
            ) from exc
        except psycopg.Error as exc:
            raise EventLogError(f"event log at {self.where}: {exc}") from exc

    # -- appending -------------------------------------------------------------------------

    def append(self, event: FleetEventRecord) -> tuple[FleetEventRecord, bool]:
        return self.append_many([event])[0]

    def append_many(
        self, events: Iterable[FleetEventRecord]
    ) -> list[tuple[FleetEventRecord, bool]]:
        if self._closed:
            raise EventLogClosed(f"the event log at {self.where} is closed")
        if self.readonly:
            raise EventLogReadOnly(f"the event log at {self.where} is open read-only")
        batch = list(events)
        # Refused before the transaction: one bad event means nothing of the batch is stored.
        for event in batch:
            check_appendable(event)
        details = [_encoder.encode(event.detail) for event in batch]
        if not batch:
            return []
        with self._connection() as conn:
            return self._append_in(conn, batch, details)

    def _append_in(
        self, conn: Connection, batch: list[FleetEventRecord], details: list[str]
    ) -> list[tuple[FleetEventRecord, bool]]:
        names = self._names
        wanted = list(dict.fromkeys(event.identity for event in batch))
        stored = self._stored(conn, wanted)
        missing = [identity for identity in wanted if identity not in stored]
        new_rows: list[tuple[Any, ...]] = []
        if missing:
            # Stored events never change, so a batch of pure retries never waits for the
            # head lock; anything new waits for it, then looks again: an appender that held
            # the lock may have committed some of these identities meanwhile (READ
            # COMMITTED: this statement's snapshot is taken after the lock was granted).
            last = _one(
                conn.execute(sql.SQL("SELECT last_sequence FROM {} FOR UPDATE").format(names.head))
            )
            stored.update(self._stored(conn, missing))
            for event, detail in zip(batch, details, strict=True):
                if event.identity in stored:
                    continue
                last += 1
                stored[event.identity] = replace(event, sequence=last)
                new_rows.append(
                    (
                        last, event.event_type.value, event.client_id, event.key,
                        event.robot_id, event.discriminator, event.stamp, detail,
                    )
                )  # fmt: skip
            if new_rows:
                with conn.cursor() as cursor:
                    # The unique identity constraint backs the head lock up: a writer that
                    # bypassed it still could not store an identity twice.
                    cursor.executemany(
                        sql.SQL(
                            "INSERT INTO {} (sequence, event_type, client_id, key, robot_id, "
                            "discriminator, stamp, detail) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                        ).format(names.events),
                        new_rows,
                    )
                conn.execute(
                    sql.SQL("UPDATE {} SET last_sequence = %s").format(names.head), (last,)
                )
        appended_at = {row[0] for row in new_rows}
        results: list[tuple[FleetEventRecord, bool]] = []
        for event in batch:
            record = stored[event.identity]
            # Only the first occurrence in the batch is the one appended now.
            now = record.sequence in appended_at
            appended_at.discard(record.sequence)
            results.append((record, now))
        return results

    def _stored(self, conn: Connection, identities: Sequence[Identity]) -> dict[Identity, Any]:
        columns = list(zip(*identities, strict=True))
        rows = conn.execute(
            sql.SQL(
                "SELECT {columns} FROM {events} JOIN unnest(%s::text[], %s::text[], "
                "%s::text[], %s::text[]) AS wanted(client_id, key, event_type, discriminator) "
                "USING (client_id, key, event_type, discriminator)"
            ).format(columns=sql.SQL(_COLUMNS), events=self._names.events),
            [list(column) for column in columns],
        ).fetchall()
        found = (_decode(row) for row in rows)
        return {record.identity: record for record in found}

    # -- reading ---------------------------------------------------------------------------

    def read(self, after_sequence: int = 0, limit: int | None = None) -> Iterator[FleetEventRecord]:
        if after_sequence < 0:
            raise EventLogError(f"after_sequence must be >= 0, got {after_sequence}")
        if limit is not None and limit < 0:
            raise EventLogError(f"limit must be >= 0 or None, got {limit}")
        if self._closed:
            raise EventLogClosed(f"the event log at {self.where} is closed")
        # Arguments are checked now, not at the first next() of a generator.
        return self._read_pages(after_sequence, limit)

    def _read_pages(self, after_sequence: int, limit: int | None) -> Iterator[FleetEventRecord]:
        # One short query per page (keyset on the primary key): a long export holds neither
        # a connection nor a snapshot between pages.
        query = sql.SQL(
            "SELECT {columns} FROM {events} WHERE sequence > %s ORDER BY sequence LIMIT %s"
        ).format(columns=sql.SQL(_COLUMNS), events=self._names.events)

        def fetch(after: int, want: int) -> list[FleetEventRecord]:
            with self._connection() as conn:
                return [_decode(row) for row in conn.execute(query, (after, want))]

        return read_in_pages(fetch, after_sequence, limit, _READ_PAGE)

    def last_sequence(self) -> int:
        with self._connection() as conn:
            head = conn.execute(sql.SQL("SELECT last_sequence FROM {}").format(self._names.head))
            return int(_one(head))

    def find(self, identity: Identity) -> FleetEventRecord | None:
        # str(): an EventType member is accepted for the type, as by the LMDB log.
        wanted = tuple(str(part) for part in identity)
        if len(wanted) != 4 or any("\x00" in part for part in wanted):
            return None  # no stored identity can match
        with self._connection() as conn:
            row = conn.execute(
                sql.SQL(
                    "SELECT {columns} FROM {events} WHERE client_id = %s AND key = %s "
                    "AND event_type = %s AND discriminator = %s"
                ).format(columns=sql.SQL(_COLUMNS), events=self._names.events),
                wanted,
            ).fetchone()
        return None if row is None else _decode(row)

    def events_for(self, client_id: str, key: str) -> list[FleetEventRecord]:
        if "\x00" in client_id or "\x00" in key:
            return []
        with self._connection() as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT {columns} FROM {events} WHERE client_id = %s AND key = %s "
                    "ORDER BY sequence"
                ).format(columns=sql.SQL(_COLUMNS), events=self._names.events),
                (client_id, key),
            ).fetchall()
        return [_decode(row) for row in rows]

    # -- inspection and lifecycle ----------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counts and sizes, for the operator tool and metrics."""
        names = self._names
        with self._connection() as conn:
            row = conn.execute(
                sql.SQL(
                    "SELECT (SELECT last_sequence FROM {head}), (SELECT count(*) FROM {events}), "
                    "pg_total_relation_size(%s::regclass)"
                ).format(head=names.head, events=names.events),
                (f"{names.schema}.events",),
            ).fetchone()
        assert row is not None  # an aggregate always answers one row
        last, count, table_bytes = row
        return {
            "events": int(count),
            "last_sequence": int(last),
            "table_bytes": int(table_bytes),
            "schema_version": SCHEMA_VERSION,
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.close()


class _Names:
    """Quoted names of the schema and its tables, composed once."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.events = sql.Identifier(schema, "events")
        self.head = sql.Identifier(schema, "events_head")
        self.meta = sql.Identifier(schema, "events_meta")

    def create_statements(self) -> list[sql.Composed]:
        return [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)),
            sql.SQL("CREATE TABLE {} (name text PRIMARY KEY, value text NOT NULL)").format(
                self.meta
            ),
            # The CHECK on a boolean key makes a second head row impossible.
            sql.SQL(
                "CREATE TABLE {} (single boolean PRIMARY KEY CHECK (single), "
                "last_sequence bigint NOT NULL CHECK (last_sequence >= 0))"
            ).format(self.head),
            # detail is json, not jsonb: json keeps the text as written, so a stored event
            # reads back equal to the one appended (jsonb reorders keys, rejects \u0000).
            sql.SQL(
                "CREATE TABLE {} ("
                "sequence bigint PRIMARY KEY CHECK (sequence > 0), "
                "event_type text NOT NULL, client_id text NOT NULL, key text NOT NULL, "
                "robot_id text NOT NULL, discriminator text NOT NULL, "
                "stamp double precision NOT NULL, detail json NOT NULL, "
                "CONSTRAINT events_identity UNIQUE (client_id, key, event_type, discriminator))"
            ).format(self.events),
            sql.SQL("CREATE INDEX events_by_key ON {} (client_id, key, sequence)").format(
                self.events
            ),
        ]


def _one(cursor: psycopg.Cursor[tuple[Any, ...]]) -> Any:
    row = cursor.fetchone()
    if row is None:
        raise EventLogCorrupted("the event log's head row is missing")
    return row[0]


def _decode(row: tuple[Any, ...]) -> FleetEventRecord:
    sequence, event_type, client_id, key, robot_id, discriminator, stamp, detail = row
    try:
        return FleetEventRecord(
            event_type=event_type,
            client_id=client_id,
            key=key,
            robot_id=robot_id,
            detail=json.loads(detail),
            stamp=stamp,
            discriminator=discriminator,
            sequence=sequence,
        )
    except (ValueError, EventLogError) as exc:
        raise EventLogCorrupted(f"event {sequence} cannot be decoded: {exc}") from None
