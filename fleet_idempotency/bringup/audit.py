"""After a run: read the orchestrator's store and event log back, as an auditor would.

Opened read-only once the fleet has stopped: the figures that ``report.check_invariants``
judges (every event identity, keys whose replay differs from the store, keys never
finished). The event log is the LMDB one under ``store_dir`` unless ``event_log`` names
another (e.g. the replicas' PostgreSQL log).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet_idempotency.events import EventLogConfig, open_event_log, replay
from fleet_idempotency.store import IdempotencyStore, StoreConfig


def audit_orchestrator(
    store_dir: Path, event_log: EventLogConfig | None = None, store_url: str | None = None
) -> dict[str, Any]:
    """``store_url``: the replicas' shared PostgreSQL database (key store and log)."""
    root = store_dir / "orchestrator"
    if store_url is not None and event_log is None:
        event_log = EventLogConfig(url=store_url)
    config = EventLogConfig(path=root / "events") if event_log is None else event_log
    with open_event_log(config, readonly=True) as log:
        events = list(log.read())
    state = replay(events)
    mismatches, unfinished = [], []
    keys = StoreConfig(url=store_url) if store_url else StoreConfig(path=root / "keys")
    with IdempotencyStore.open(keys, readonly=True) as store:
        for record in store.iter_records():
            if record.state.is_in_flight:
                unfinished.append(record.key)
            view = state.keys.get((record.scope, record.key))
            if view is None or (view.state, view.status_code) != (
                record.state,
                record.status_code,
            ):
                mismatches.append(record.key)
    return {
        "event_identities": [event.identity for event in events],
        "replay_mismatches": mismatches,
        "unfinished_keys": unfinished,
    }
