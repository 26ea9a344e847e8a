"""The after-run audit reads the orchestrator's event log from either backend."""

from __future__ import annotations

from pathlib import Path

from fleet_idempotency.bringup.audit import audit_orchestrator
from fleet_idempotency.events import EventType, FleetEventRecord
from fleet_idempotency.store import IdempotencyStore, StoreConfig

from support.event_log_support import LogBackend


def test_the_audit_reads_the_event_log_it_is_given(tmp_path: Path, log_backend: LogBackend) -> None:
    store_dir = tmp_path / "fleet"
    IdempotencyStore.open(StoreConfig(path=store_dir / "orchestrator" / "keys")).close()
    events = [
        FleetEventRecord(EventType.ACCEPTED, "wms", "k-1", "amr-1", {}, 1.0),
        FleetEventRecord(EventType.ROBOT_OFFLINE, "", "", "amr-1", {}, 2.0, "amr-1#1"),
    ]
    with log_backend.open() as log:
        log.append_many(events)
    if log_backend.is_postgres:
        audit = audit_orchestrator(store_dir, log_backend.config())
    else:  # the default: the LMDB log beside the store
        Path(log_backend.where).rename(store_dir / "orchestrator" / "events")
        audit = audit_orchestrator(store_dir)
    assert audit == {
        "event_identities": [e.identity for e in events],
        "replay_mismatches": [],
        "unfinished_keys": [],
    }
