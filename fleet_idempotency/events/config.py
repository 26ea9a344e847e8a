"""Configuration of one event log: an LMDB environment directory or a PostgreSQL schema."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

MiB = 1024 * 1024
POSTGRES_SCHEME = "postgresql://"


class EventLogConfig(BaseModel):
    """Validated, immutable event-log settings; pydantic errors name the offending field.

    Exactly one of ``path`` (LMDB, the embedded default) and ``url`` (PostgreSQL, shared by
    several orchestrator replicas) says where the log lives; ``open_event_log`` picks the
    backend from it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path | None = None
    # libpq URL, e.g. postgresql://fleet@db.example:5432/fleet (password: prefer PGPASSFILE).
    url: str | None = None
    # One schema holds the log's tables, so the log can share a database with the key store.
    # A plain lower-case identifier: it is never quoted differently by hand-written SQL.
    pg_schema: str = Field(default="fleet_idem_events", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    # Connections per process; appends are serialised in the database anyway, more
    # connections only let reads run beside an append.
    pg_pool_size: int = Field(default=4, ge=1, le=64)
    # How long a call waits for a connection before EventLogUnavailable.
    pg_connect_timeout_s: float = Field(default=5.0, gt=0, le=300)
    map_size_initial: int = Field(default=8 * MiB, ge=64 * 1024)
    # The log is append-only and never compacted, so the ceiling is far above the store's:
    # the map is reserved address space, the file grows only with what is written.
    map_size_max: int = Field(default=16 * 1024 * MiB, ge=64 * 1024)
    # fsync on every commit (data and meta page): an event is on disk when append returns.
    # False is only for tests and throwaway simulations.
    durable: bool = True

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.path is None) == (self.url is None):
            raise ValueError(
                "give exactly one of path (an LMDB directory) and url (postgresql://...)"
            )
        if self.url is not None and not self.url.startswith(POSTGRES_SCHEME):
            raise ValueError(f"url must start with {POSTGRES_SCHEME} (PostgreSQL is the only URL)")
        if self.map_size_initial > self.map_size_max:
            raise ValueError(
                f"map_size_initial ({self.map_size_initial}) must not exceed "
                f"map_size_max ({self.map_size_max})"
            )
        return self
