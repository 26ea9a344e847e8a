"""One way to open the event log, whatever backend the configuration names."""

from __future__ import annotations

from .base import EventLog
from .config import EventLogConfig
from .lmdb_log import LmdbEventLog


def open_event_log(config: EventLogConfig, readonly: bool = False) -> EventLog:
    """``config.url`` (postgresql://) opens the shared PostgreSQL log, ``config.path`` the
    embedded LMDB one. ``readonly``: no writes, and for LMDB no writer lock."""
    if config.url is not None:
        # Imported here: a robot or tool using LMDB never loads the PostgreSQL driver.
        from .postgres_log import PostgresEventLog  # noqa: PLC0415

        return PostgresEventLog(config, readonly=readonly)
    return LmdbEventLog(config, readonly=readonly)
