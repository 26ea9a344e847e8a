"""The event-log interface: what a distributed backend (PostgreSQL, etcd) would implement.

Contract of every backend:

- sequence numbers start at 1, strictly increase and have no gaps, and are assigned by the
  backend inside the transaction that stores the event;
- an event whose identity is already stored appends nothing: the stored event comes back
  with ``appended=False``;
- when append returns, the event is durable (as durable as the backend's configuration).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Self

from .model import FleetEventRecord, Identity


class EventLog(ABC):
    @abstractmethod
    def append(self, event: FleetEventRecord) -> tuple[FleetEventRecord, bool]:
        """Store ``event``; return the stored record (with its sequence) and whether it
        was appended now (False: its identity was already in the log)."""

    @abstractmethod
    def append_many(
        self, events: Iterable[FleetEventRecord]
    ) -> list[tuple[FleetEventRecord, bool]]:
        """``append`` for each event in one transaction (one fsync); all or nothing.

        Duplicates inside the batch are deduplicated like duplicates of stored events.
        """

    @abstractmethod
    def read(self, after_sequence: int = 0, limit: int | None = None) -> Iterator[FleetEventRecord]:
        """Events with sequence > ``after_sequence``, in sequence order, at most ``limit``."""

    @abstractmethod
    def last_sequence(self) -> int:
        """Sequence of the newest event; 0 for an empty log."""

    @abstractmethod
    def find(self, identity: Identity) -> FleetEventRecord | None:
        """The stored event with this (client_id, key, event_type, discriminator)."""

    @abstractmethod
    def events_for(self, client_id: str, key: str) -> list[FleetEventRecord]:
        """Every event of one (client, key), in sequence order, through an index."""

    def stats(self) -> dict[str, int]:
        """Counts and sizes, for the operator tool and metrics; backends add their own."""
        return {"last_sequence": self.last_sequence()}

    @abstractmethod
    def close(self) -> None:
        """Release the backend; further calls raise EventLogClosed. Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def read_in_pages(
    fetch_page: Callable[[int, int], list[FleetEventRecord]],
    after_sequence: int,
    limit: int | None,
    page_size: int,
) -> Iterator[FleetEventRecord]:
    """Events after ``after_sequence`` (at most ``limit``), fetched ``page_size`` at a time
    by ``fetch_page(after_sequence, want)``: a long export never holds one transaction or
    connection for the whole log."""
    remaining = limit
    while remaining is None or remaining > 0:
        want = page_size if remaining is None else min(page_size, remaining)
        page = fetch_page(after_sequence, want)
        yield from page
        if len(page) < want:
            return
        after_sequence = page[-1].sequence
        if remaining is not None:
            remaining -= len(page)
