"""Which orchestrator process serves each API namespace, as its OrchestratorBoot
messages tell, and how often it has been replaced.

A request sent to a process that has since been replaced will never be answered, so the
ROS client and the HTTP API both re-send it at once; each send remembers the
replacement count it was made under. The first boot id heard is no replacement: it may
arrive after a first send to that very process. Thread-safe; no ROS imports.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class OrchestratorBoots:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._boot_ids: dict[str, str] = {}
        self._replacements: dict[str, int] = {}
        self._wakers: set[Callable[[], object]] = set()

    def heard(self, namespace: str, boot_id: str) -> None:
        """A boot message on ``namespace``: a new boot id there wakes every waiter."""
        with self._lock:
            previous = self._boot_ids.get(namespace)
            self._boot_ids[namespace] = boot_id
            if previous is None or previous == boot_id:
                return
            self._replacements[namespace] = self._replacements.get(namespace, 0) + 1
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def replacements(self, namespace: str) -> int:
        with self._lock:
            return self._replacements.get(namespace, 0)

    @contextmanager
    def waking(self, wake: Callable[[], object]) -> Iterator[None]:
        """Call ``wake`` (from the subscriber's thread) on each replacement meanwhile."""
        with self._lock:
            self._wakers.add(wake)
        try:
            yield
        finally:
            with self._lock:
                self._wakers.discard(wake)
