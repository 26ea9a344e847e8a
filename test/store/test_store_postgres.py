"""What only the PostgreSQL backend has: its configuration, schemas, shared accounting and
an unreachable server. The semantics themselves are pinned for both backends elsewhere."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from pydantic import ValidationError

from fleet_idempotency.bringup.postgres import LocalPostgres, free_port
from fleet_idempotency.store import (
    Claimed,
    IdempotencyStore,
    InProgress,
    Record,
    SchemaMismatch,
    State,
    StoreConfig,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
)

from support.store_support import ROBOT, claim_args, make_config

# -- configuration ---------------------------------------------------------------------------


def test_config_needs_exactly_one_of_path_and_url(tmp_path: Path) -> None:
    for settings in ({}, {"path": tmp_path, "url": "postgresql://u@localhost/db"}):
        with pytest.raises(ValidationError) as error:
            StoreConfig(**settings)  # type: ignore[arg-type]
        assert "exactly one of path" in str(error.value)
    assert StoreConfig(path=tmp_path).url is None
    assert StoreConfig(url="postgresql://u@localhost/db").path is None


@pytest.mark.parametrize(
    "url", ["postgres://u@localhost/db", "mysql://u@localhost/db", "localhost/db", "postgresql:"]
)
def test_config_url_must_be_a_postgresql_url(url: str) -> None:
    with pytest.raises(ValidationError) as error:
        StoreConfig(url=url)
    assert "url" in str(error.value) and "postgresql://" in str(error.value)


@pytest.mark.parametrize("schema", ["", "Fleet", "1st", "a-b", "a.b", 'x"; drop', "pg_x", "s" * 64])
def test_config_pg_schema_must_be_a_plain_identifier(schema: str) -> None:
    with pytest.raises(ValidationError) as error:
        StoreConfig(url="postgresql://u@localhost/db", pg_schema=schema)
    assert "pg_schema" in str(error.value)


def test_messages_name_the_database_without_its_password() -> None:
    config = StoreConfig(url="postgresql://orch:s3cret@db.example:5432/fleet", pg_schema="keys")
    assert "s3cret" not in config.location
    assert config.location == "postgresql://orch:***@db.example:5432/fleet (schema keys)"


# -- schemas and what they hold --------------------------------------------------------------


def test_two_schemas_in_one_database_are_two_stores(postgres_url: str) -> None:
    first = make_config(postgres_url, pg_schema="orchestrator_a")
    second = make_config(postgres_url, pg_schema="orchestrator_b")
    with IdempotencyStore.open(first) as a, IdempotencyStore.open(second) as b:
        assert isinstance(a.claim(**claim_args("k")), Claimed)
        assert isinstance(b.claim(**claim_args("k")), Claimed)
        assert a.stats()["records"] == b.stats()["records"] == 1


def test_replicas_share_records_and_the_live_byte_count(postgres_url: str) -> None:
    config = make_config(postgres_url)
    with IdempotencyStore.open(config) as one, IdempotencyStore.open(config) as two:
        empty = one.stats()["used_bytes"]
        assert isinstance(one.claim(**claim_args("k1", slot="x" * 1000)), Claimed)
        assert isinstance(two.claim(**claim_args("k1", slot="x" * 1000)), InProgress)
        assert isinstance(two.claim(**claim_args("k2", slot="y" * 1000)), Claimed)
        stats = one.stats()
        assert stats["records"] == 2 and stats["in_flight"] == 2
        # Both replicas' claims count against the one limit, whoever made them.
        assert stats["used_bytes"] - empty > 2000
        assert two.stats()["used_bytes"] == stats["used_bytes"]
        assert stats["file_bytes"] > 0 and stats["map_resizes"] == 0
        two.release(ROBOT, "k2")
        after_release = one.stats()["used_bytes"]
        assert after_release < stats["used_bytes"]
    with IdempotencyStore.open(config) as again:
        assert again.stats()["used_bytes"] == after_release
    with psycopg.connect(postgres_url) as admin:
        shards = admin.execute("SELECT count(*) FROM fleet_idem_store.live_bytes").fetchone()
    assert shards == (1,)  # closed replicas folded their counts into one row


def test_a_store_with_another_schema_version_is_refused(postgres_url: str) -> None:
    config = make_config(postgres_url)
    IdempotencyStore.open(config).close()
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("UPDATE fleet_idem_store.meta SET value = '99' WHERE name = 'schema_version'")
    with pytest.raises(SchemaMismatch) as error:
        IdempotencyStore.open(config)
    assert "schema version 99" in str(error.value)


def test_a_schema_holding_records_but_no_marker_is_refused(postgres_url: str) -> None:
    config = make_config(postgres_url)
    with IdempotencyStore.open(config) as store:
        store.claim(**claim_args("k"))
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("DELETE FROM fleet_idem_store.meta")
    with pytest.raises(StoreCorrupted) as error:
        IdempotencyStore.open(config)
    assert "not a fleet_idempotency store" in str(error.value)


def test_read_only_open_of_a_missing_store_creates_nothing(postgres_url: str) -> None:
    with pytest.raises(StoreError) as error:
        IdempotencyStore.open(make_config(postgres_url), readonly=True)
    assert "no store at" in str(error.value)
    with psycopg.connect(postgres_url) as admin:
        found = admin.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'fleet_idem_store'"
        ).fetchone()
    assert found == (0,)


def test_durable_false_turns_synchronous_commit_off_for_the_store_only(
    postgres_url: str,
) -> None:
    for durable, expected in ((True, "on"), (False, "off")):
        with IdempotencyStore.open(make_config(postgres_url, durable=durable)) as store:
            backend = store._backend
            with backend._pool.connection() as conn:  # type: ignore[attr-defined]
                assert conn.execute("SHOW synchronous_commit").fetchone() == (expected,)


# -- an unreachable server -------------------------------------------------------------------


def test_a_server_restart_is_a_clear_retryable_error_then_the_store_works_again(
    postgres_server: LocalPostgres, postgres_url: str
) -> None:
    config = make_config(postgres_url, pg_timeout_s=2.0)
    store = IdempotencyStore.open(config)
    try:
        assert isinstance(store.claim(**claim_args("before")), Claimed)
        postgres_server.stop()
        try:
            for attempt in (
                lambda: store.claim(**claim_args("while-down")),
                lambda: store.finish(
                    ROBOT, "before", state=State.COMPLETED, status_code=200, result_json="{}"
                ),
                lambda: store.check(ROBOT, "before"),
            ):
                with pytest.raises(StoreUnavailable) as error:
                    attempt()
                assert error.value.status_code == 503
                assert "PostgreSQL store at postgresql://" in str(error.value)
                assert "unavailable" in str(error.value)
        finally:
            # Same port as before (start() would pick a new one): the URL stays valid, and
            # the session's other tests find the shared server running again.
            postgres_server.restart()
        # Back: nothing was lost, nothing half-written, and no reopen was needed.
        assert store.check(ROBOT, "while-down") is None
        assert isinstance(store.claim(**claim_args("while-down")), Claimed)
        done = store.finish(
            ROBOT, "before", state=State.COMPLETED, status_code=200, result_json="{}"
        )
        assert done.state == State.COMPLETED
        found = store.check(ROBOT, "before")
        assert isinstance(found, Record) and found.state == State.COMPLETED
    finally:
        store.close()


def test_opening_a_store_on_an_unreachable_server_is_a_clear_error() -> None:
    url = f"postgresql://nobody@127.0.0.1:{free_port()}/none"
    with pytest.raises(StoreUnavailable) as error:
        IdempotencyStore.open(make_config(url, pg_timeout_s=0.5))
    assert "unavailable" in str(error.value)
