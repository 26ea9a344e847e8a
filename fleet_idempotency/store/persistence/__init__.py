"""Persistence backends behind one small interface (a second backend is one new file)."""

from .base import CapacityExhausted, PersistenceBackend, ReadView, StoreCounts, WriteView

__all__ = ["CapacityExhausted", "PersistenceBackend", "ReadView", "StoreCounts", "WriteView"]
