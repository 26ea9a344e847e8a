"""LMDB implementation of the event log.

One environment directory, four named sub-databases:

- ``events``   u64be(sequence) -> event (codec.encode_event)
- ``identity`` client NUL key NUL event_type NUL discriminator -> u64be(sequence)
- ``by_key``   client NUL key NUL u64be(sequence) -> b""   (events_for: one prefix walk)
- ``meta``     format marker, schema version, next sequence

A separate environment from the idempotency store on purpose: the log only grows and is
read in bulk, the store is small and read by key; neither should grow the other's map or
share its writer lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from ..store.persistence.lmdb_env import META_DB, LmdbEnvironment, LmdbErrors, LmdbLayout
from .base import EventLog, read_in_pages
from .codec import (
    FORMAT_MARKER,
    SCHEMA_VERSION,
    by_key_entry,
    check_appendable,
    decode_event,
    encode_event,
    identity_key,
    key_prefix,
    sequence_key,
    sequence_of,
)
from .config import EventLogConfig
from .model import (
    EventLogClosed,
    EventLogCorrupted,
    EventLogError,
    EventLogFull,
    EventLogReadOnly,
    EventLogSchemaMismatch,
    FleetEventRecord,
    Identity,
)

_META_NEXT = b"next_sequence"
# next_sequence is written with the format marker, so a log always has one.
_LAYOUT = LmdbLayout(
    (b"events", b"identity", b"by_key", META_DB), FORMAT_MARKER, SCHEMA_VERSION,
    data_db=b"events", initial_meta={_META_NEXT: sequence_key(1)},
)  # fmt: skip
_ERRORS = LmdbErrors(
    "event log", EventLogError, EventLogCorrupted, EventLogSchemaMismatch, EventLogFull,
    EventLogReadOnly, EventLogClosed,
)  # fmt: skip
# Reads are served in pages of short transactions: a long export never pins old pages
# (which would stop LMDB from reusing them) nor holds off a map resize.
_READ_PAGE = 512


class LmdbEventLog(EventLog):
    """An append-only event log in one LMDB environment.

    Open one instance per process and path (LMDB forbids opening an environment twice in
    one process) and share it between threads. Other processes may open the same path:
    LMDB's writer lock serialises their appends, so sequences stay gap-free across them.
    """

    def __init__(self, config: EventLogConfig, *, readonly: bool = False) -> None:
        if config.path is None:
            raise EventLogError("an LMDB event log needs config.path (open_event_log reads url)")
        self.path = Path(config.path)
        self.readonly = readonly
        self._env = LmdbEnvironment(
            self.path,
            _LAYOUT,
            _ERRORS,
            map_size_initial=config.map_size_initial,
            map_size_max=config.map_size_max,
            # Both syncs: an acknowledged event must survive a power cut, or a replay
            # after reboot would forget a dispatch that already happened.
            sync=config.durable,
            metasync=True,
            readonly=readonly,
        )
        self._dbs = self._env.dbs
        self._events = self._dbs[b"events"]
        self._identity = self._dbs[b"identity"]
        self._by_key = self._dbs[b"by_key"]
        self._meta = self._dbs[META_DB]

    # -- appending -------------------------------------------------------------------------

    def append(self, event: FleetEventRecord) -> tuple[FleetEventRecord, bool]:
        return self.append_many([event])[0]

    def append_many(
        self, events: Iterable[FleetEventRecord]
    ) -> list[tuple[FleetEventRecord, bool]]:
        batch = list(events)
        # Refused before the transaction: one bad event means nothing of the batch is stored.
        for event in batch:
            check_appendable(event)
        encoded = [(event, encode_event(event)) for event in batch]
        if not encoded:
            return []
        return self._env.run_write(lambda txn: self._append_in(txn, encoded))

    def _append_in(
        self, txn: Any, encoded: list[tuple[FleetEventRecord, bytes]]
    ) -> list[tuple[FleetEventRecord, bool]]:
        next_sequence = sequence_of(txn.get(_META_NEXT, db=self._meta))
        results: list[tuple[FleetEventRecord, bool]] = []
        for event, value in encoded:
            ident = identity_key(event.identity)
            stored_at = txn.get(ident, db=self._identity)
            if stored_at is not None:
                # Looked up inside this transaction, so a duplicate earlier in the same
                # batch is found too.
                results.append((self._decode_at(txn, sequence_of(stored_at)), False))
                continue
            sequence = next_sequence
            next_sequence += 1
            seq_key = sequence_key(sequence)
            # append=True: LMDB refuses a key that is not past the last one, so a sequence
            # can never overwrite an event, whatever happens to next_sequence.
            if not txn.put(seq_key, value, db=self._events, append=True):
                raise EventLogCorrupted(f"{self.path}: sequence {sequence} already used")
            txn.put(ident, seq_key, db=self._identity, overwrite=False)
            txn.put(by_key_entry(event.client_id, event.key, sequence), b"", db=self._by_key)
            results.append((replace(event, sequence=sequence), True))
        txn.put(_META_NEXT, sequence_key(next_sequence), db=self._meta)
        return results

    def _decode_at(self, txn: Any, sequence: int) -> FleetEventRecord:
        raw = txn.get(sequence_key(sequence), db=self._events)
        if raw is None:
            raise EventLogCorrupted(f"{self.path}: an index points at missing event {sequence}")
        return decode_event(sequence, raw)

    def read(self, after_sequence: int = 0, limit: int | None = None) -> Iterator[FleetEventRecord]:
        if after_sequence < 0:
            raise EventLogError(f"after_sequence must be >= 0, got {after_sequence}")
        if limit is not None and limit < 0:
            raise EventLogError(f"limit must be >= 0 or None, got {limit}")
        # Arguments are checked now, not at the first next() of a generator.
        return self._read_pages(after_sequence, limit)

    def _read_pages(self, after_sequence: int, limit: int | None) -> Iterator[FleetEventRecord]:
        def fetch(after: int, want: int) -> list[FleetEventRecord]:
            return self._env.run_read(partial(self._page, after_sequence=after, want=want))

        return read_in_pages(fetch, after_sequence, limit, _READ_PAGE)

    def _page(self, txn: Any, after_sequence: int, want: int) -> list[FleetEventRecord]:
        page: list[FleetEventRecord] = []
        with txn.cursor(db=self._events) as cursor:
            if not cursor.set_range(sequence_key(after_sequence + 1)):
                return page
            for raw_key, raw_value in cursor:
                page.append(decode_event(sequence_of(raw_key), raw_value))
                if len(page) >= want:
                    break
        return page

    def last_sequence(self) -> int:
        return self._env.run_read(lambda txn: sequence_of(txn.get(_META_NEXT, db=self._meta)) - 1)

    def find(self, identity: Identity) -> FleetEventRecord | None:
        ident = identity_key(identity)

        def lookup(txn: Any) -> FleetEventRecord | None:
            stored_at = txn.get(ident, db=self._identity)
            return None if stored_at is None else self._decode_at(txn, sequence_of(stored_at))

        return self._env.run_read(lookup)

    def events_for(self, client_id: str, key: str) -> list[FleetEventRecord]:
        prefix = key_prefix(client_id, key)

        def walk(txn: Any) -> list[FleetEventRecord]:
            found: list[FleetEventRecord] = []
            with txn.cursor(db=self._by_key) as cursor:
                if not cursor.set_range(prefix):
                    return found
                for entry in cursor.iternext(keys=True, values=False):
                    if not entry.startswith(prefix):
                        break
                    found.append(self._decode_at(txn, sequence_of(entry[len(prefix) :])))
            return found

        return self._env.run_read(walk)

    # -- inspection and lifecycle ----------------------------------------------------------

    def map_size(self) -> int:
        return self._env.map_size()

    def stats(self) -> dict[str, int]:
        """Counts and sizes, for the operator tool and metrics."""

        def collect(txn: Any) -> dict[str, int]:
            used_pages, entries = self._env.used_pages(txn)
            return {
                "events": entries[b"events"],
                "last_sequence": sequence_of(txn.get(_META_NEXT, db=self._meta)) - 1,
                "used_bytes": used_pages * self._env.page_size,
            }

        counts = self._env.run_read(collect)
        counts.update(
            map_size=self.map_size(),
            map_size_max=self._env.map_size_max,
            file_bytes=self._env.file_bytes(),
            resizes=self._env.resizes,
            schema_version=SCHEMA_VERSION,
        )
        return counts

    def close(self) -> None:
        self._env.close()
