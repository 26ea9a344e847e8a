"""PostgreSQL implementation of the persistence interface, for stores shared by replicas.

One schema (``StoreConfig.pg_schema``) per store, four tables:

- ``records``    (scope, key) primary key -> codec.encode_record body, plus the two columns
  the indexes need: ``expires_ms`` (GC reads the head of ``records_expiry``) and
  ``in_flight`` (recovery reads the partial index ``records_in_flight``)
- ``tombstones`` (scope, key) -> codec.encode_tombstone body, ``expires_ms`` indexed
- ``meta``       format marker and schema version, as in LMDB's meta sub-database
- ``live_bytes`` one row per open backend instance: the change in live data it committed

Scope and key are ``text COLLATE "C"`` so that (scope, key) order is byte order, the
order LMDB scans in; both are validated ASCII tokens.

Why the semantics' read-then-write is safe across processes here: every write
transaction runs at REPEATABLE READ (one snapshot for all of ``apply``'s reads), and
every write is guarded by what ``apply`` read: a new row is ``INSERT … ON CONFLICT DO
NOTHING``, a replacement or deletion matches the previous body byte for byte. A
concurrent transaction that got there first makes PostgreSQL raise a serialization
failure (the row changed after our snapshot) or makes the guard match zero rows; either
way the transaction is rolled back and ``apply`` runs again on a fresh snapshot, where it
now sees the winner's record and answers as a duplicate. The interface already allows
``apply`` to run more than once. Deadlocks between two batches touching the same keys in
opposite orders are detected by PostgreSQL (after ``deadlock_timeout``) and retried too.
"""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, suppress
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

from ..errors import (
    ReadOnlyStore,
    SchemaMismatch,
    StoreClosed,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
)
from ..records import Record, Tombstone
from .base import PersistenceBackend, ReadView, StoreCounts, WriteView
from .codec import (
    FORMAT_MARKER,
    SCHEMA_VERSION,
    decode_record_as,
    decode_tombstone_as,
    encode_record,
    encode_tombstone,
)

T = TypeVar("T")
E = TypeVar("E")

_META_FORMAT = "format"
_META_SCHEMA = "schema_version"
# Bytes a row costs beyond its body, key and scope (tuple header, item pointer, the entries
# of the primary key and expiry indexes): an estimate, so that one map_size_max admits
# about as many records on PostgreSQL as on LMDB. Exact accounting of PostgreSQL's pages
# would not help: deleted rows keep their pages until VACUUM, so GC would free nothing.
_ROW_OVERHEAD = 96
# Conflicts only come from other writers on the same keys; a few dozen rounds resolve even
# a hot key between many replicas, and beyond that the caller gets a retryable 503.
_MAX_ATTEMPTS = 40
_BACKOFF_FIRST_S = 0.001
_BACKOFF_MAX_S = 0.05
# Connections each backend may hold: readers of the fast path run in parallel, writes one
# at a time (group commit), so a few are enough and many replicas still fit the server.
_POOL_MAX = 8
_BASE_SHARD = ""

# Serialization failure, deadlock: the transaction lost a race and may simply run again.
_RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected, pg_errors.UniqueViolation)


class _Conflict(Exception):
    """A guarded write matched nothing: another writer changed the row first.

    Deliberately not a StoreError: the group committer treats a StoreError raised by a job
    as that job's answer and commits its batch-mates, while this must abort the whole
    transaction so that ``apply`` runs again.
    """


def _row_bytes(scope: str, key: str, body: bytes) -> int:
    return len(scope) + len(key) + len(body) + _ROW_OVERHEAD


def _schema_sql(schema: str) -> list[str]:
    s = f'"{schema}"'
    return [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        f"""CREATE TABLE IF NOT EXISTS {s}.records (
            scope text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            expires_ms bigint NOT NULL,
            in_flight boolean NOT NULL,
            body bytea NOT NULL,
            PRIMARY KEY (scope, key))""",
        f"CREATE INDEX IF NOT EXISTS records_expiry ON {s}.records (expires_ms, scope, key)",
        f"""CREATE INDEX IF NOT EXISTS records_in_flight ON {s}.records (scope, key)
            WHERE in_flight""",
        f"""CREATE TABLE IF NOT EXISTS {s}.tombstones (
            scope text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            expires_ms bigint NOT NULL,
            body bytea NOT NULL,
            PRIMARY KEY (scope, key))""",
        f"""CREATE INDEX IF NOT EXISTS tombstones_expiry
            ON {s}.tombstones (expires_ms, scope, key)""",
        f"CREATE TABLE IF NOT EXISTS {s}.meta (name text PRIMARY KEY, value bytea NOT NULL)",
        f"""CREATE TABLE IF NOT EXISTS {s}.live_bytes (
            shard text PRIMARY KEY, bytes bigint NOT NULL)""",
    ]


class _Sql:
    """Every statement, with the schema filled in once."""

    def __init__(self, schema: str) -> None:
        s = f'"{schema}"'
        self.get_record = f"SELECT body FROM {s}.records WHERE scope = %s AND key = %s"
        self.get_tombstone = f"SELECT body FROM {s}.tombstones WHERE scope = %s AND key = %s"
        self.scan_records_first = (
            f"SELECT scope, key, body FROM {s}.records ORDER BY scope, key LIMIT %s"
        )
        self.scan_records_after = (
            f"SELECT scope, key, body FROM {s}.records WHERE (scope, key) > (%s, %s) "
            "ORDER BY scope, key LIMIT %s"
        )
        self.scan_tombstones_first = (
            f"SELECT scope, key, body FROM {s}.tombstones ORDER BY scope, key LIMIT %s"
        )
        self.scan_tombstones_after = (
            f"SELECT scope, key, body FROM {s}.tombstones WHERE (scope, key) > (%s, %s) "
            "ORDER BY scope, key LIMIT %s"
        )
        self.in_flight = (
            f"SELECT scope, key, body FROM {s}.records WHERE in_flight ORDER BY scope, key"
        )
        self.expired_records = (
            f"SELECT scope, key, body FROM {s}.records WHERE expires_ms <= %s "
            "ORDER BY expires_ms, scope, key LIMIT %s"
        )
        self.expired_tombstones = (
            f"SELECT scope, key, body FROM {s}.tombstones WHERE expires_ms <= %s "
            "ORDER BY expires_ms, scope, key LIMIT %s"
        )
        self.used_bytes = f"SELECT coalesce(sum(bytes), 0)::bigint FROM {s}.live_bytes"
        self.counts = (
            f"SELECT (SELECT count(*) FROM {s}.records), "
            f"(SELECT count(*) FROM {s}.tombstones), "
            f"(SELECT count(*) FROM {s}.records WHERE in_flight), "
            f"(SELECT coalesce(sum(bytes), 0)::bigint FROM {s}.live_bytes), "
            f"pg_total_relation_size('{s}.records') + pg_total_relation_size('{s}.tombstones')"
            f" + pg_total_relation_size('{s}.meta') + pg_total_relation_size('{s}.live_bytes')"
        )
        self.get_meta = f"SELECT value FROM {s}.meta WHERE name = %s"
        self.put_meta = (
            f"INSERT INTO {s}.meta (name, value) VALUES (%s, %s) "
            "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value"
        )
        self.insert_record = (
            f"INSERT INTO {s}.records (scope, key, expires_ms, in_flight, body) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
        )
        self.update_record = (
            f"UPDATE {s}.records SET expires_ms = %s, in_flight = %s, body = %s "
            "WHERE scope = %s AND key = %s AND body = %s"
        )
        self.delete_record = f"DELETE FROM {s}.records WHERE scope = %s AND key = %s AND body = %s"
        self.insert_tombstone = (
            f"INSERT INTO {s}.tombstones (scope, key, expires_ms, body) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
        )
        self.update_tombstone = (
            f"UPDATE {s}.tombstones SET expires_ms = %s, body = %s "
            "WHERE scope = %s AND key = %s AND body = %s"
        )
        self.delete_tombstone = (
            f"DELETE FROM {s}.tombstones WHERE scope = %s AND key = %s AND body = %s"
        )
        self.add_live_bytes = (
            f"INSERT INTO {s}.live_bytes (shard, bytes) VALUES (%s, %s) "
            f"ON CONFLICT (shard) DO UPDATE SET bytes = {s}.live_bytes.bytes + EXCLUDED.bytes"
        )
        # One statement, so it needs no retry even at READ COMMITTED while other
        # instances fold theirs into the same base row.
        self.fold_live_bytes = (
            f"WITH mine AS (DELETE FROM {s}.live_bytes WHERE shard = %s RETURNING bytes) "
            f"INSERT INTO {s}.live_bytes (shard, bytes) SELECT %s, bytes FROM mine "
            f"ON CONFLICT (shard) DO UPDATE SET bytes = {s}.live_bytes.bytes + EXCLUDED.bytes"
        )
        self.meta_table = f"SELECT to_regclass('{s}.meta') IS NOT NULL"
        self.has_records = f"SELECT EXISTS (SELECT 1 FROM {s}.records)"


class _PgReadView(ReadView):
    __slots__ = ("_b", "_cur", "_translate")

    def __init__(
        self, backend: PostgresBackend, cursor: psycopg.Cursor[Any], translate: bool
    ) -> None:
        self._b = backend
        self._cur = cursor
        # Reads outside run_write raise StoreUnavailable themselves; inside run_write the
        # raw error must reach run_write, which decides between retrying and giving up.
        self._translate = translate

    def _rows(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            return self._cur.execute(query, params).fetchall()
        except psycopg.OperationalError as error:
            if self._translate:
                raise self._b.unavailable(error) from error
            raise

    def get_record(self, scope: str, key: str) -> Record | None:
        rows = self._rows(self._b.sql.get_record, (scope, key))
        return decode_record_as(scope, key, rows[0][0]) if rows else None

    def get_tombstone(self, scope: str, key: str) -> Tombstone | None:
        rows = self._rows(self._b.sql.get_tombstone, (scope, key))
        return decode_tombstone_as(scope, key, rows[0][0]) if rows else None

    def scan_records(self, after: tuple[str, str] | None, limit: int) -> list[Record]:
        sql = self._b.sql
        rows = (
            self._rows(sql.scan_records_first, (limit,))
            if after is None
            else self._rows(sql.scan_records_after, (*after, limit))
        )
        return [decode_record_as(scope, key, body) for scope, key, body in rows]

    def scan_tombstones(self, after: tuple[str, str] | None, limit: int) -> list[Tombstone]:
        sql = self._b.sql
        rows = (
            self._rows(sql.scan_tombstones_first, (limit,))
            if after is None
            else self._rows(sql.scan_tombstones_after, (*after, limit))
        )
        return [decode_tombstone_as(scope, key, body) for scope, key, body in rows]

    def in_flight_records(self) -> list[Record]:
        rows = self._rows(self._b.sql.in_flight, ())
        return [decode_record_as(scope, key, body) for scope, key, body in rows]

    def used_bytes(self) -> int:
        return int(self._rows(self._b.sql.used_bytes, ())[0][0])

    def counts(self) -> StoreCounts:
        records, tombstones, in_flight, used, file_bytes = self._rows(self._b.sql.counts, ())[0]
        return StoreCounts(
            records=int(records),
            tombstones=int(tombstones),
            in_flight=int(in_flight),
            used_bytes=int(used) + self._pending_bytes(),
            # No map to grow: the configured ceiling is the whole "map".
            map_size=self._b.map_size_max,
            file_bytes=int(file_bytes),
        )

    def _pending_bytes(self) -> int:
        return 0

    def get_meta(self, name: str) -> bytes | None:
        rows = self._rows(self._b.sql.get_meta, (name,))
        return bytes(rows[0][0]) if rows else None


class _PgWriteView(_PgReadView, WriteView):
    __slots__ = ("delta",)

    def __init__(self, backend: PostgresBackend, cursor: psycopg.Cursor[Any]) -> None:
        super().__init__(backend, cursor, translate=False)
        # Change in live bytes made by this transaction, added to our shard row at commit.
        self.delta = 0

    def _pending_bytes(self) -> int:
        return self.delta

    def used_bytes(self) -> int:
        return super().used_bytes() + self.delta

    def _write(self, query: str, params: Sequence[Any]) -> None:
        if self._cur.execute(query, params).rowcount != 1:
            raise _Conflict(query)

    def put_record(self, record: Record, previous: Record | None) -> None:
        sql, scope, key = self._b.sql, record.scope, record.key
        body = encode_record(record)
        expires_ms, in_flight = _expiry_ms(record.expires_at), record.state.is_in_flight
        if previous is None:
            self._write(sql.insert_record, (scope, key, expires_ms, in_flight, body))
            self.delta += _row_bytes(scope, key, body)
            return
        # The codec is deterministic, so re-encoding what apply read gives the stored bytes.
        old = encode_record(previous)
        self._write(sql.update_record, (expires_ms, in_flight, body, scope, key, old))
        self.delta += len(body) - len(old)

    def delete_record(self, record: Record) -> None:
        old = encode_record(record)
        self._write(self._b.sql.delete_record, (record.scope, record.key, old))
        self.delta -= _row_bytes(record.scope, record.key, old)

    def put_tombstone(self, tombstone: Tombstone, previous: Tombstone | None) -> None:
        sql, scope, key = self._b.sql, tombstone.scope, tombstone.key
        body = encode_tombstone(tombstone)
        expires_ms = _expiry_ms(tombstone.tombstone_expires_at)
        if previous is None:
            self._write(sql.insert_tombstone, (scope, key, expires_ms, body))
            self.delta += _row_bytes(scope, key, body)
            return
        old = encode_tombstone(previous)
        self._write(sql.update_tombstone, (expires_ms, body, scope, key, old))
        self.delta += len(body) - len(old)

    def delete_tombstone(self, tombstone: Tombstone) -> None:
        old = encode_tombstone(tombstone)
        self._write(self._b.sql.delete_tombstone, (tombstone.scope, tombstone.key, old))
        self.delta -= _row_bytes(tombstone.scope, tombstone.key, old)

    def expired_records(self, now: float, limit: int) -> list[Record]:
        rows = self._rows(self._b.sql.expired_records, (_now_ms(now), limit))
        return [decode_record_as(scope, key, body) for scope, key, body in rows]

    def expired_tombstones(self, now: float, limit: int) -> list[Tombstone]:
        rows = self._rows(self._b.sql.expired_tombstones, (_now_ms(now), limit))
        return [decode_tombstone_as(scope, key, body) for scope, key, body in rows]

    def put_meta(self, name: str, value: bytes) -> None:
        self._cur.execute(self._b.sql.put_meta, (name, value))


def _expiry_ms(epoch_s: float) -> int:
    # Rounded up, as in LMDB's index: "expires_ms <= now" then implies "expires_at <= now",
    # so GC never picks a record that is not yet expired and skips it on every scan.
    return max(0, math.ceil(epoch_s * 1000.0))


def _now_ms(now: float) -> int:
    return math.floor(now * 1000.0)


class _ReadSnapshot(AbstractContextManager[ReadView]):
    __slots__ = ("_backend", "_conn")

    def __init__(self, backend: PostgresBackend) -> None:
        self._backend = backend

    def __enter__(self) -> ReadView:
        self._conn = self._backend.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return _PgReadView(self._backend, self._conn.cursor(), translate=True)

    def __exit__(self, *exc_info: object) -> None:
        self._backend.end(self._conn, "ROLLBACK")


class PostgresBackend(PersistenceBackend):
    """One store in one schema of a PostgreSQL database; any number of processes may share it."""

    def __init__(
        self,
        url: str,
        *,
        schema: str,
        durable: bool,
        map_size_max: int,
        timeout_s: float,
        location: str,
        readonly: bool = False,
    ) -> None:
        self.readonly = readonly
        self.map_size_max = map_size_max
        self.location = location
        self.sql = _Sql(schema)
        self._schema = schema
        self._timeout_s = timeout_s
        self._shard = uuid.uuid4().hex
        self._closed = False
        self._lock = threading.Lock()
        self._durable = durable
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
            psycopg_pool.ConnectionPool(
                url,
                min_size=1,
                max_size=_POOL_MAX,
                timeout=timeout_s,
                # The pool retries a failed connection with a doubling delay; giving up after
                # one timeout lets the next call start a fresh attempt at once, so the store
                # is back within about one timeout of the server, not after minutes of
                # backoff (the default gives up only after 5 minutes).
                reconnect_timeout=timeout_s,
                # Autocommit: transactions are begun explicitly, each with the isolation
                # level it needs (REPEATABLE READ, read-only for snapshots).
                kwargs={
                    "autocommit": True,
                    "application_name": "fleet_idempotency store",
                    "connect_timeout": max(1, round(timeout_s)),
                },
                configure=self._configure,
                open=False,
                name=f"fleet-idem-store-{schema}",
            )
        )
        try:
            self._pool.open(wait=True, timeout=timeout_s)
            self._prepare_schema()
        except psycopg.OperationalError as error:
            self._pool.close()
            raise self.unavailable(error) from error
        except BaseException:
            self._pool.close()
            raise

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        if not self._durable:
            # Commits return before the WAL is flushed: a server crash may lose the last
            # ones (never corrupt them), exactly what durable=False accepts on LMDB.
            conn.execute("SET synchronous_commit TO off")

    # -- schema ------------------------------------------------------------------------------

    def _prepare_schema(self) -> None:
        with self._pool.connection() as conn:
            if self.readonly:
                if not conn.execute(self.sql.meta_table).fetchone()[0]:  # type: ignore[index]
                    raise StoreError(f"no store at {self.location} (schema or meta table missing)")
                self._check_meta(conn)
                return
            with conn.transaction():
                # Two processes opening a new store at once: CREATE … IF NOT EXISTS is not
                # safe against a concurrent CREATE, so the set-up is serialised per schema.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._schema,))
                for statement in _schema_sql(self._schema):
                    conn.execute(statement)
                untouched = not conn.execute(self.sql.has_records).fetchone()[0]  # type: ignore[index]
                marker = conn.execute(self.sql.get_meta, (_META_FORMAT,)).fetchone()
                if marker is None and untouched:
                    conn.execute(self.sql.put_meta, (_META_FORMAT, FORMAT_MARKER))
                    conn.execute(self.sql.put_meta, (_META_SCHEMA, str(SCHEMA_VERSION).encode()))
                    return
                self._check_meta(conn)

    def _check_meta(self, conn: psycopg.Connection[Any]) -> None:
        def meta(name: str) -> bytes | None:
            row = conn.execute(self.sql.get_meta, (name,)).fetchone()
            return None if row is None else bytes(row[0])

        version = meta(_META_SCHEMA)
        if meta(_META_FORMAT) != FORMAT_MARKER or version is None:
            raise StoreCorrupted(
                f"{self.location} is not a fleet_idempotency store (format marker missing)"
            )
        if version != str(SCHEMA_VERSION).encode():
            raise SchemaMismatch(
                f"{self.location} was written with store schema version "
                f"{version.decode(errors='replace')}; this code reads version "
                f"{SCHEMA_VERSION}. Use the matching release or migrate the store."
            )

    # -- connections ---------------------------------------------------------------------------

    def unavailable(self, error: BaseException) -> StoreUnavailable:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return StoreUnavailable(
            f"the PostgreSQL store at {self.location} is unavailable ({detail}); "
            "retry later, the store reconnects by itself"
        )

    def begin(self, statement: str) -> psycopg.Connection[Any]:
        """A pooled connection inside a new transaction; StoreUnavailable if there is none.

        A failed BEGIN is always safe to repeat, and after a server restart the pool still
        holds connections to the old server: the first attempt finds them dead, the pool
        check drops them all, and the next attempt gets a fresh connection.
        """
        if self._closed:
            raise StoreClosed(f"the store at {self.location} is closed")
        for attempt in range(2):
            try:
                conn = self._pool.getconn()
            except psycopg.OperationalError as error:  # PoolTimeout: nothing to connect to
                raise self.unavailable(error) from error
            try:
                conn.execute(statement)
                return conn
            except psycopg.OperationalError as error:
                self._pool.putconn(conn)
                if attempt == 1:
                    raise self.unavailable(error) from error
                with suppress(psycopg.Error):
                    self._pool.check()
        raise AssertionError("unreachable")

    def end(self, conn: psycopg.Connection[Any], statement: str) -> None:
        try:
            if not conn.broken:
                with suppress(psycopg.Error):
                    conn.execute(statement)
        finally:
            self._pool.putconn(conn)

    # -- the interface -------------------------------------------------------------------------

    def read(self) -> AbstractContextManager[ReadView]:
        return _ReadSnapshot(self)

    def run_write(self, apply: Callable[[WriteView], T]) -> T:
        if self.readonly:
            raise ReadOnlyStore(f"the store at {self.location} is open read-only")
        delay = _BACKOFF_FIRST_S
        for _attempt in range(_MAX_ATTEMPTS):
            conn = self.begin("BEGIN ISOLATION LEVEL REPEATABLE READ")
            committing = False
            try:
                view = _PgWriteView(self, conn.cursor())
                result = apply(view)
                if view.delta:
                    conn.execute(self.sql.add_live_bytes, (self._shard, view.delta))
                committing = True
                conn.execute("COMMIT")
            except (_Conflict, *_RETRYABLE):
                self.end(conn, "ROLLBACK")
            except psycopg.OperationalError as error:
                self.end(conn, "ROLLBACK")
                if committing:
                    raise StoreUnavailable(
                        f"the connection to the PostgreSQL store at {self.location} failed "
                        f"while committing ({error}); the write may or may not be stored: "
                        "check the key before acting on it"
                    ) from error
                if not conn.broken:
                    raise self.unavailable(error) from error
                # The connection died before COMMIT, so the server rolled back: run again.
                with suppress(psycopg.Error):
                    self._pool.check()
            except BaseException:
                self.end(conn, "ROLLBACK")
                raise
            else:
                self._pool.putconn(conn)
                return result
            # Jittered, so that two replicas that collided do not collide again in step.
            time.sleep(random.uniform(0, delay))
            delay = min(delay * 2, _BACKOFF_MAX_S)
        raise StoreUnavailable(
            f"the PostgreSQL store at {self.location} could not commit after {_MAX_ATTEMPTS} "
            "attempts because other writers kept changing the same keys; retry later"
        )

    def resize_count(self) -> int:
        return 0

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if not self.readonly:
                # Keep the shard table small: fold this instance's count into the base row.
                with suppress(psycopg.Error), self._pool.connection() as conn:
                    conn.execute(self.sql.fold_live_bytes, (self._shard, _BASE_SHARD))
        finally:
            self._pool.close()
