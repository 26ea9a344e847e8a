"""The transactional primitives the idempotency semantics need from a storage engine.

The semantics layer (``idempotency.py``) expresses every operation as a function over a
``WriteView`` run inside one atomic, durable commit; a backend only has to provide that
commit, snapshot reads, and the two expiry scans GC relies on. Index maintenance (expiry
order, in-flight set) is the backend's job because how to index is engine-specific.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TypeVar

from ..errors import StoreFull
from ..records import Record, Tombstone

T = TypeVar("T")


class CapacityExhausted(StoreFull):
    """The engine cannot grow any further; the write was rolled back entirely."""


@dataclass(frozen=True, slots=True)
class StoreCounts:
    records: int
    tombstones: int
    in_flight: int
    # Bytes held by live data (excluding free pages), compared against the claim limit.
    used_bytes: int
    # Current size of the storage area (LMDB map) and the size of the file on disk.
    map_size: int
    file_bytes: int


class ReadView(ABC):
    """A consistent snapshot of the store."""

    @abstractmethod
    def get_record(self, scope: str, key: str) -> Record | None: ...

    @abstractmethod
    def get_tombstone(self, scope: str, key: str) -> Tombstone | None: ...

    @abstractmethod
    def scan_records(self, after: tuple[str, str] | None, limit: int) -> list[Record]:
        """Records in (scope, key) order, strictly after ``after``."""

    @abstractmethod
    def scan_tombstones(self, after: tuple[str, str] | None, limit: int) -> list[Tombstone]: ...

    @abstractmethod
    def in_flight_records(self) -> list[Record]:
        """Every ACCEPTED/IN_PROGRESS record (served from an index, not a full scan)."""

    @abstractmethod
    def counts(self) -> StoreCounts: ...

    @abstractmethod
    def used_bytes(self) -> int:
        """Bytes held by live data, cheap enough to call once per claim."""

    @abstractmethod
    def get_meta(self, name: str) -> bytes | None: ...


class WriteView(ReadView):
    """A snapshot that can also write; all writes commit together or not at all."""

    @abstractmethod
    def put_record(self, record: Record, previous: Record | None) -> None:
        """Insert or replace; ``previous`` is the stored version, needed to fix indexes."""

    @abstractmethod
    def delete_record(self, record: Record) -> None: ...

    @abstractmethod
    def put_tombstone(self, tombstone: Tombstone, previous: Tombstone | None) -> None: ...

    @abstractmethod
    def delete_tombstone(self, tombstone: Tombstone) -> None: ...

    @abstractmethod
    def expired_records(self, now: float, limit: int) -> list[Record]:
        """Up to ``limit`` records with ``expires_at <= now``, oldest expiry first."""

    @abstractmethod
    def expired_tombstones(self, now: float, limit: int) -> list[Tombstone]: ...

    @abstractmethod
    def put_meta(self, name: str, value: bytes) -> None: ...


class PersistenceBackend(ABC):
    readonly: bool

    @abstractmethod
    def read(self) -> AbstractContextManager[ReadView]: ...

    @abstractmethod
    def run_write(self, apply: Callable[[WriteView], T]) -> T:
        """Run ``apply`` in one write transaction and commit it durably (when configured).

        ``apply`` may be called more than once (e.g. after the engine grew its storage), so
        it must derive everything from the view it is given. Raises CapacityExhausted
        when the write cannot fit even at maximum size; nothing is then written.
        """

    @abstractmethod
    def resize_count(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    def iter_all_records(self, page_size: int = 512) -> Iterator[Record]:
        """All records, read in pages of short snapshots so no reader is held for long."""
        after: tuple[str, str] | None = None
        while True:
            with self.read() as view:
                page = view.scan_records(after, page_size)
            yield from page
            if len(page) < page_size:
                return
            after = (page[-1].scope, page[-1].key)

    def iter_all_tombstones(self, page_size: int = 512) -> Iterator[Tombstone]:
        after: tuple[str, str] | None = None
        while True:
            with self.read() as view:
                page = view.scan_tombstones(after, page_size)
            yield from page
            if len(page) < page_size:
                return
            after = (page[-1].scope, page[-1].key)
