"""A shared/exclusive lock whose shared side costs one uncontended lock per read.

Resizing an LMDB map invalidates every open transaction of the process, so snapshot
reads hold the lock shared and a resize takes it exclusively. Resizes are rare (the map
doubles) while reads happen on every duplicate check, so the cost is put on the exclusive
side: each reading thread owns a slot lock that only it and a resizer ever touch, and a
resize acquires every slot. A reader therefore never contends with other readers (a
condition-variable reader count made every read take a process-wide lock twice).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager


class SharedExclusiveLock:
    def __init__(self) -> None:
        self._registry = threading.Lock()
        # Weak: a slot lives as long as its thread's thread-local, so threads that come and
        # go do not accumulate slots.
        self._slots: weakref.WeakSet[threading.RLock] = weakref.WeakSet()
        self._local = threading.local()

    def acquire_shared(self) -> threading.RLock:
        """Enter a shared section; pass the returned slot to ``release_shared``."""
        slot: threading.RLock | None = getattr(self._local, "slot", None)
        if slot is None:
            # Re-entrant so a thread may nest reads (it never deadlocks on itself).
            slot = threading.RLock()
            with self._registry:
                self._slots.add(slot)
            self._local.slot = slot
        slot.acquire()
        return slot

    @staticmethod
    def release_shared(slot: threading.RLock) -> None:
        slot.release()

    @contextmanager
    def shared(self) -> Iterator[None]:
        slot = self.acquire_shared()
        try:
            yield
        finally:
            slot.release()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        # Holding the registry lock keeps new threads from registering a slot we missed.
        with self._registry:
            slots = list(self._slots)
            for slot in slots:
                slot.acquire()
            try:
                yield
            finally:
                for slot in slots:
                    slot.release()
