"""One orchestrator replica's shared parts: key store, event log and leases in PostgreSQL.

Free of ROS, so the node stays a shell and the tests drive replicas directly. A replica
accepts submits for every robot (the shared store's claim decides duplicates across
replicas), but dispatches only to robots whose lease it holds (``leases.py``); it learns
of commands other replicas accepted for its robots from the shared log
(``OrchestratorCore.follow_log``), and a slow sweep of the store catches a claim whose
accepting replica died before logging it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleet_idempotency.events import EventLog, EventLogConfig, open_event_log
from fleet_idempotency.store import IdempotencyStore, StoreConfig

from .core import OrchestratorCore
from .leases import LeaseKeeper
from .postgres_leases import PostgresLeaseTable


@dataclass(frozen=True)
class ReplicaSettings:
    store_url: str
    # Shown in the lease table; a random suffix keeps a restarted replica a new holder.
    name: str = "replica"
    lease_ttl_s: float = 3.0


def open_shared_store(url: str, **settings: Any) -> IdempotencyStore:
    """The shared key store. No start-up recovery: another replica's in-flight claims
    are not dead (the lease holder of their robot takes them over, see ``adopt``)."""
    return IdempotencyStore.open(StoreConfig(url=url, **settings), recover=False)


def open_shared_log(url: str, *, durable: bool) -> EventLog:
    return open_event_log(EventLogConfig(url=url, durable=durable))


class ReplicaLeases:
    """Keeps ``core``'s robots leased: adopt on acquire, abandon on loss."""

    def __init__(
        self,
        core: OrchestratorCore,
        settings: ReplicaSettings,
        robots: list[str],
        *,
        on_change: Callable[[], None],
        log: Callable[[str], None],
    ) -> None:
        self.holder = f"{settings.name}/{uuid.uuid4().hex[:8]}"
        self.table = PostgresLeaseTable(settings.store_url)
        self._core = core
        self._on_change = on_change
        self._log = log
        self.keeper = LeaseKeeper(
            self.table,
            self.holder,
            robots,
            ttl_s=settings.lease_ttl_s,
            on_acquired=self._acquired,
            on_lost=core.abandon,
            on_error=log,
        )
        core.lease_token = self.keeper.token

    def _acquired(self, robot_id: str, token: int) -> None:
        taken = self._core.adopt(robot_id, token)
        self._log(f"took the lease on {robot_id} (token {token}): {taken} unfinished commands")
        self._on_change()

    def start(self) -> None:
        self.keeper.start()

    def close(self) -> None:
        self.keeper.stop(release=True)
        self.table.close()
