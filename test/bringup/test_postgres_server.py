"""The throwaway PostgreSQL server the tests, benches and replica demo start."""

from __future__ import annotations

import os

import psycopg
import pytest

from fleet_idempotency.bringup.postgres import LocalPostgres


def test_a_local_server_serves_keeps_data_across_a_restart_and_leaves_nothing() -> None:
    server = LocalPostgres()
    with server:
        with psycopg.connect(server.url, autocommit=True) as connection:
            connection.execute("CREATE TABLE kept (n integer)")
            connection.execute("INSERT INTO kept VALUES (7)")
        url = server.url
        server.restart(mode="immediate")
        assert server.url == url
        with psycopg.connect(server.url) as connection:
            assert connection.execute("SELECT n FROM kept").fetchall() == [(7,)]
    assert not server.root.exists()


def test_each_test_gets_an_empty_database_of_its_own(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as connection:
        tables = connection.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    assert tables == (0,)


@pytest.mark.skipif(os.geteuid() != 0, reason="runuser is used only when running as root")
def test_a_root_whose_path_lacks_sbin_still_starts_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # env -i, cron and minimal CI runners give root a PATH without /usr/sbin, runuser's home.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with LocalPostgres() as server, psycopg.connect(server.url) as connection:
        assert connection.execute("SELECT 1").fetchone() == (1,)
