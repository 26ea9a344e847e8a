"""Map growth, the full store, and refusing files that are not (our) stores.

The full-store tests run on both backends: on PostgreSQL ``map_size_max`` bounds the live
data the store counts (rows' bytes plus a fixed overhead each), as the map bounds it on
LMDB. Map growth and foreign or damaged files are LMDB's alone (PostgreSQL has no map;
its own schema checks are in test_store_postgres.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import lmdb
import pytest
from pydantic import ValidationError

from fleet_idempotency.store import (
    Claimed,
    IdempotencyStore,
    Record,
    SchemaMismatch,
    State,
    StoreCorrupted,
    StoreFull,
)

from support.store_support import (
    ROBOT,
    FakeClock,
    Location,
    claim_args,
    make_config,
    read_line,
    spawn_child,
)

KIB = 1024
MIB = 1024 * KIB


def test_map_grows_automatically_up_to_the_maximum(tmp_path: Path) -> None:
    config = make_config(
        tmp_path / "s", map_size_initial=128 * KIB, map_size_max=32 * MIB, durable=False
    )
    with IdempotencyStore.open(config) as store:
        for i in range(400):
            assert isinstance(store.claim(**claim_args(f"k{i}", slot="x" * 3000)), Claimed)
        stats = store.stats()
        assert stats["map_size"] > 128 * KIB and stats["map_resizes"] >= 1
    with IdempotencyStore.open(config) as store:
        assert len(list(store.iter_records())) == 400


def test_full_store_refuses_claims_keeps_data_and_still_finishes_and_collects(
    store_location: Location,
) -> None:
    clock = FakeClock()
    config = make_config(
        store_location,
        map_size_initial=256 * KIB,
        map_size_max=2 * MIB,
        default_retention_s=10,
        durable=False,
    )
    claimed: list[str] = []
    with IdempotencyStore.open(config, clock=clock) as store:
        with pytest.raises(StoreFull) as full:
            for i in range(1000):
                store.claim(**claim_args(f"k{i}", slot="x" * 8000))
                claimed.append(f"k{i}")
        assert full.value.status_code == 507 and "refused" in str(full.value)
        assert 50 < len(claimed) < 1000
        assert store.stats()["store_full"] == 1
        # Headroom: every claimed command can still record its result.
        for key in claimed:
            store.finish(
                ROBOT,
                key,
                state=State.COMPLETED,
                status_code=200,
                result_json=json.dumps({"k": key}),
            )
        with pytest.raises(StoreFull):
            store.claim(**claim_args("one-more", slot="x" * 8000))
        clock.advance(11)
        assert store.gc().records_purged == len(claimed)
        assert isinstance(store.claim(**claim_args("after-gc", slot="x" * 8000)), Claimed)
    with IdempotencyStore.open(config, clock=clock) as store:
        tombstoned = [store.check(ROBOT, key) for key in claimed]
        assert all(t is not None and t.state == State.COMPLETED for t in tombstoned)


def test_claims_that_stopped_at_full_are_all_intact_after_reopen(
    store_location: Location,
) -> None:
    config = make_config(
        store_location, map_size_initial=256 * KIB, map_size_max=1 * MIB, durable=False
    )
    claimed: list[str] = []
    with IdempotencyStore.open(config) as store:
        try:
            for i in range(1000):
                store.claim(**claim_args(f"k{i}", slot="y" * 5000))
                claimed.append(f"k{i}")
        except StoreFull:
            pass
    with IdempotencyStore.open(config) as store:
        for key in claimed:
            found = store.check(ROBOT, key)
            assert (
                isinstance(found, Record) and json.loads(found.payload_json)["slot"] == "y" * 5000
            )


def test_growth_by_another_process_is_adopted(tmp_path: Path) -> None:
    config = make_config(tmp_path / "s", map_size_initial=256 * KIB, map_size_max=64 * MIB)
    with IdempotencyStore.open(config) as store:
        store.claim(**claim_args("before"))
        child = spawn_child("grow", str(config.path), "600")
        child_map = json.loads(read_line(child))["map_size"]
        assert child.wait(30) == 0
        assert child_map > 256 * KIB
        # Our map is smaller than the file now: reads and writes must adopt the new size.
        assert isinstance(store.check(ROBOT, "grow-599"), Record)
        assert isinstance(store.claim(**claim_args("after")), Claimed)
        assert store.stats()["records"] == 602


def test_a_file_that_is_not_lmdb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.mkdir()
    (path / "data.mdb").write_bytes(b"definitely not a database" * 500)
    with pytest.raises(StoreCorrupted) as error:
        IdempotencyStore.open(make_config(path))
    assert "not hold a readable LMDB store" in str(error.value)


def test_a_plain_file_where_the_directory_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s").write_text("hello")
    with pytest.raises(StoreCorrupted):
        IdempotencyStore.open(make_config(tmp_path / "s"))


def test_another_applications_lmdb_is_refused(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path / "s"), max_dbs=2)
    env.open_db(b"users")
    env.close()
    with pytest.raises(StoreCorrupted) as error:
        IdempotencyStore.open(make_config(tmp_path / "s"))
    assert "not a fleet_idempotency store" in str(error.value)


def test_a_store_with_another_schema_version_is_refused(tmp_path: Path) -> None:
    config = make_config(tmp_path / "s")
    with IdempotencyStore.open(config) as store:
        store.claim(**claim_args("k"))
    env = lmdb.open(str(config.path), max_dbs=8)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"schema_version", b"99", db=meta)
    env.close()
    with pytest.raises(SchemaMismatch) as error:
        IdempotencyStore.open(config)
    assert "schema version 99" in str(error.value)


@pytest.mark.parametrize(
    ("field", "overrides"),
    [
        ("map_size_initial", {"map_size_initial": 10}),
        ("headroom_fraction", {"headroom_fraction": 0.9}),
        ("expired_key_policy", {"expired_key_policy": "maybe"}),
        ("recovery_policy_by_type", {"recovery_policy_by_type": {"pick": "retry"}}),
        ("surprise", {"surprise": 1}),
        ("default_retention_s", {"default_retention_s": 0}),
    ],
)
def test_config_errors_name_the_field(tmp_path: Path, field: str, overrides: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValidationError) as error:
        make_config(tmp_path, **overrides)
    assert field in str(error.value)


def test_config_initial_larger_than_max_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as error:
        make_config(tmp_path, map_size_initial=4 * MIB, map_size_max=2 * MIB)
    assert "map_size_initial" in str(error.value)
