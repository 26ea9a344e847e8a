"""Persistence backends behind one small interface (a second backend is one new file)."""

from __future__ import annotations

from ..config import StoreConfig
from .base import CapacityExhausted, PersistenceBackend, ReadView, StoreCounts, WriteView
from .lmdb_backend import LmdbBackend


def open_backend(config: StoreConfig, *, readonly: bool = False) -> PersistenceBackend:
    """The backend ``config`` names: LMDB for a ``path``, PostgreSQL for a ``url``."""
    if config.url is not None:
        # Imported here, not at the top: a robot's store (LMDB) never loads psycopg.
        from .postgres_backend import PostgresBackend  # noqa: PLC0415

        return PostgresBackend(
            config.url,
            schema=config.pg_schema,
            durable=config.durable,
            map_size_max=config.map_size_max,
            timeout_s=config.pg_timeout_s,
            location=config.location,
            readonly=readonly,
        )
    assert config.path is not None  # StoreConfig guarantees one of url and path
    return LmdbBackend(
        config.path,
        map_size_initial=config.map_size_initial,
        map_size_max=config.map_size_max,
        durable=config.durable,
        metasync=config.metasync,
        readonly=readonly,
    )


__all__ = [
    "CapacityExhausted",
    "PersistenceBackend",
    "ReadView",
    "StoreCounts",
    "WriteView",
    "open_backend",
]
