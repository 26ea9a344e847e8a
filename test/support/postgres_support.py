"""A real PostgreSQL server for the whole test session, and a fresh database per test.

The server is Debian's (scripts/setup.sh --test installs it), started in a temporary data
directory on a free port by ``bringup.postgres.LocalPostgres``; no test talks to a fake.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from fleet_idempotency.bringup.postgres import LocalPostgres

_database_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: LocalPostgres) -> Iterator[str]:
    """URL of an empty database of its own, dropped after the test."""
    import psycopg

    name = f"test_{next(_database_numbers)}"
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
