"""The lease table in PostgreSQL: one row per robot, each statement atomic on its own.

Rows are never deleted: a released or expired lease keeps its token, so the next holding
gets a higher one and a robot's fence only ever rises. ``now()`` is the database's clock,
the only clock every replica shares.
"""

from __future__ import annotations

import re

import psycopg
from psycopg_pool import ConnectionPool

from .leases import LeaseTable, LeaseUnavailable

_SCHEMA_PATTERN = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresLeaseTable(LeaseTable):
    def __init__(self, url: str, *, schema: str = "fleet_idem_leases") -> None:
        if not _SCHEMA_PATTERN.match(schema):
            raise ValueError(f"schema must be a plain lower-case identifier, got {schema!r}")
        self._table = f"{schema}.robot_leases"
        self._pool = ConnectionPool(
            url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
        )
        try:
            self._pool.open(wait=True, timeout=10.0)
        except psycopg.Error as error:
            self._pool.close()
            raise LeaseUnavailable(f"lease table unreachable at start: {error}") from error
        try:
            with self._pool.connection(timeout=5.0) as connection, connection.transaction():
                # Replicas start together: "IF NOT EXISTS" alone still races in the catalog
                # (a unique violation), so creators take turns under an advisory lock.
                connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._table,))
                connection.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                connection.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._table} ("
                    " robot_id text PRIMARY KEY, holder text NOT NULL,"
                    " token bigint NOT NULL, expires_at timestamptz NOT NULL)"
                )
        except (psycopg.Error, TimeoutError) as error:
            self._pool.close()
            raise LeaseUnavailable(f"lease table could not be created: {error}") from error

    def _execute(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        try:
            with self._pool.connection(timeout=5.0) as connection:
                cursor = connection.execute(sql, params)
                return cursor.fetchall() if cursor.description else []
        except (psycopg.Error, TimeoutError) as error:
            # psycopg_pool raises PoolTimeout (a psycopg.Error) when no connection comes.
            raise LeaseUnavailable(f"lease table unreachable: {error}") from error

    def acquire(self, robot_id: str, holder: str, ttl_s: float) -> int | None:
        rows = self._execute(
            f"INSERT INTO {self._table} AS lease (robot_id, holder, token, expires_at)"
            " VALUES (%s, %s, 1, now() + make_interval(secs => %s))"
            " ON CONFLICT (robot_id) DO UPDATE SET holder = EXCLUDED.holder,"
            " token = lease.token + 1, expires_at = EXCLUDED.expires_at"
            " WHERE lease.expires_at < now()"
            " RETURNING token",
            (robot_id, holder, ttl_s),
        )
        return int(rows[0][0]) if rows else None  # type: ignore[call-overload]

    def renew(self, robot_id: str, holder: str, token: int, ttl_s: float) -> bool:
        rows = self._execute(
            f"UPDATE {self._table} SET expires_at = now() + make_interval(secs => %s)"
            " WHERE robot_id = %s AND holder = %s AND token = %s AND expires_at >= now()"
            " RETURNING token",
            (ttl_s, robot_id, holder, token),
        )
        return bool(rows)

    def release(self, robot_id: str, holder: str, token: int) -> None:
        self._execute(
            f"UPDATE {self._table} SET expires_at = now() - interval '1 second'"
            " WHERE robot_id = %s AND holder = %s AND token = %s",
            (robot_id, holder, token),
        )

    def holders(self) -> dict[str, tuple[str, int]]:
        rows = self._execute(
            f"SELECT robot_id, holder, token FROM {self._table} WHERE expires_at >= now()", ()
        )
        return {str(robot): (str(holder), int(token)) for robot, holder, token in rows}  # type: ignore[call-overload]

    def close(self) -> None:
        self._pool.close()
