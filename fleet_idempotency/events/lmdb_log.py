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

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import replace
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from ..store.persistence.rwlock import SharedExclusiveLock
from .base import EventLog
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

T = TypeVar("T")

_DB_NAMES = (b"events", b"identity", b"by_key", b"meta")
_META_FORMAT = b"format"
_META_SCHEMA = b"schema_version"
_META_NEXT = b"next_sequence"
# Reads are served in pages of short transactions: a long export never pins old pages
# (which would stop LMDB from reusing them) nor holds off a map resize.
_READ_PAGE = 512


class _Retry(Enum):
    MAP_RESIZED = "another process grew the map"
    MAP_FULL = "the transaction did not fit in the map"


class LmdbEventLog(EventLog):
    """An append-only event log in one LMDB environment.

    Open one instance per process and path (LMDB forbids opening an environment twice in
    one process) and share it between threads. Other processes may open the same path:
    LMDB's writer lock serialises their appends, so sequences stay gap-free across them.
    """

    def __init__(self, config: EventLogConfig, *, readonly: bool = False) -> None:
        self.path = Path(config.path)
        self.readonly = readonly
        self._map_size_max = config.map_size_max
        self._resizes = 0
        self._closed = False
        # Resizing the map invalidates every transaction of the process: transactions run
        # under the shared side, a resize takes the exclusive side.
        self._rw = SharedExclusiveLock()
        # One write transaction at a time in this process; LMDB's own lock does the same
        # across processes.
        self._write_lock = threading.Lock()
        self._env = self._open_env(config)
        try:
            self._dbs = self._open_dbs()
            self._check_format()
        except BaseException:
            self._env.close()
            raise
        self._events = self._dbs[b"events"]
        self._identity = self._dbs[b"identity"]
        self._by_key = self._dbs[b"by_key"]
        self._meta = self._dbs[b"meta"]

    # -- opening ---------------------------------------------------------------------------

    def _open_env(self, config: EventLogConfig) -> Any:
        if self.path.exists() and not self.path.is_dir():
            raise EventLogCorrupted(
                f"{self.path} is a file; an event log is a directory holding data.mdb and lock.mdb"
            )
        if self.readonly and not (self.path / "data.mdb").exists():
            raise EventLogError(f"no event log at {self.path} (data.mdb not found)")
        if not self.readonly:
            self.path.mkdir(parents=True, exist_ok=True)
        try:
            return lmdb.open(
                str(self.path),
                map_size=config.map_size_initial,
                subdir=True,
                readonly=self.readonly,
                sync=config.durable,
                # Both syncs: an acknowledged event must survive a power cut, or a replay
                # after reboot would forget a dispatch that already happened.
                metasync=config.durable,
                max_dbs=len(_DB_NAMES),
                max_readers=256,
                # Mostly sequential appends and bulk reads of recent pages: the OS
                # readahead would mostly fetch pages nobody asked for.
                readahead=False,
                meminit=False,
                lock=True,
            )
        except (lmdb.InvalidError, lmdb.VersionMismatchError, lmdb.CorruptedError) as exc:
            raise EventLogCorrupted(
                f"{self.path} does not hold a readable LMDB event log ({exc}); move it aside "
                "to start a new log, or restore it from a backup"
            ) from None
        except lmdb.Error as exc:
            raise EventLogError(f"cannot open the event log at {self.path}: {exc}") from None

    def _open_dbs(self) -> dict[bytes, Any]:
        with self._env.begin() as txn:
            catalogue = {bytes(name) for name, _ in txn.cursor()}
        foreign = catalogue - set(_DB_NAMES)
        if foreign or (self.readonly and b"meta" not in catalogue):
            found = sorted(name.decode(errors="replace") for name in catalogue)
            raise EventLogCorrupted(
                f"{self.path} is an LMDB environment but not a fleet_idempotency event log "
                f"(sub-databases found: {found})"
            )
        try:
            if self.readonly:
                return {name: self._env.open_db(name, create=False) for name in _DB_NAMES}
            with self._env.begin(write=True) as txn:
                return {name: self._env.open_db(name, txn=txn) for name in _DB_NAMES}
        except lmdb.Error as exc:
            raise EventLogCorrupted(
                f"{self.path}: cannot open the event log's sub-databases ({exc})"
            ) from None

    def _check_format(self) -> None:
        if self.readonly:
            with self._env.begin() as txn:
                self._check_meta(txn)
            return
        # Check and initialise in one write transaction: two processes opening a new log at
        # once must not both write "next_sequence = 1" after one of them appended.
        with self._env.begin(write=True) as txn:
            meta = self._dbs[b"meta"]
            untouched = (
                txn.stat(meta)["entries"] == 0 and txn.stat(self._dbs[b"events"])["entries"] == 0
            )
            if untouched:
                txn.put(_META_FORMAT, FORMAT_MARKER, db=meta)
                txn.put(_META_SCHEMA, str(SCHEMA_VERSION).encode(), db=meta)
                txn.put(_META_NEXT, sequence_key(1), db=meta)
                return
            self._check_meta(txn)

    def _check_meta(self, txn: Any) -> None:
        meta = self._dbs[b"meta"]
        marker = txn.get(_META_FORMAT, db=meta)
        version = txn.get(_META_SCHEMA, db=meta)
        if marker != FORMAT_MARKER or version is None or txn.get(_META_NEXT, db=meta) is None:
            raise EventLogCorrupted(
                f"{self.path} is not a fleet_idempotency event log (format marker missing)"
            )
        if bytes(version) != str(SCHEMA_VERSION).encode():
            raise EventLogSchemaMismatch(
                f"{self.path} was written with event-log schema version "
                f"{bytes(version).decode(errors='replace')}; this code reads version "
                f"{SCHEMA_VERSION}. Use the matching release or migrate the log."
            )

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
        return self._run_write(lambda txn: self._append_in(txn, encoded))

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

    def _run_write(self, apply: Callable[[Any], T]) -> T:
        if self.readonly:
            raise EventLogReadOnly(f"the event log at {self.path} is open read-only")
        with self._write_lock:
            while True:
                outcome = self._attempt_write(apply)
                if not isinstance(outcome, _Retry):
                    return outcome
                # The aborted transaction is replayed whole: sequences are assigned anew.
                if outcome is _Retry.MAP_RESIZED:
                    self._adopt_map_size()
                else:
                    self._grow()

    def _attempt_write(self, apply: Callable[[Any], T]) -> T | _Retry:
        with self._rw.shared():
            self._ensure_open()
            try:
                txn = self._env.begin(write=True)
            except lmdb.MapResizedError:
                return _Retry.MAP_RESIZED
            try:
                result = apply(txn)
                txn.commit()  # sync=True: returns after the fsync
                return result
            except lmdb.MapFullError:
                with suppress(lmdb.Error):
                    txn.abort()
                return _Retry.MAP_FULL
            except BaseException:
                with suppress(lmdb.Error):
                    txn.abort()
                raise

    def _adopt_map_size(self) -> None:
        # Size 0 asks LMDB to adopt the size another process wrote into the file.
        with self._rw.exclusive():
            self._env.set_mapsize(0)

    def _grow(self) -> None:
        current = self.map_size()
        if current >= self._map_size_max:
            raise EventLogFull(
                f"the event log at {self.path} reached map_size_max "
                f"({self._map_size_max} bytes); nothing was appended"
            )
        with self._rw.exclusive():
            self._env.set_mapsize(min(self._map_size_max, current * 2))
        self._resizes += 1

    # -- reading ---------------------------------------------------------------------------

    def _run_read(self, apply: Callable[[Any], T]) -> T:
        while True:
            outcome = self._attempt_read(apply)
            if not isinstance(outcome, _Retry):
                return outcome
            self._adopt_map_size()

    def _attempt_read(self, apply: Callable[[Any], T]) -> T | _Retry:
        with self._rw.shared():
            self._ensure_open()
            try:
                txn = self._env.begin(buffers=False)
            except lmdb.MapResizedError:
                return _Retry.MAP_RESIZED
            try:
                return apply(txn)
            finally:
                with suppress(lmdb.Error):
                    txn.abort()

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
        remaining = limit
        while remaining is None or remaining > 0:
            want = _READ_PAGE if remaining is None else min(_READ_PAGE, remaining)
            page = self._run_read(partial(self._page, after_sequence=after_sequence, want=want))
            yield from page
            if len(page) < want:
                return
            after_sequence = page[-1].sequence
            if remaining is not None:
                remaining -= len(page)

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
        return self._run_read(lambda txn: sequence_of(txn.get(_META_NEXT, db=self._meta)) - 1)

    def find(self, identity: Identity) -> FleetEventRecord | None:
        ident = identity_key(identity)

        def lookup(txn: Any) -> FleetEventRecord | None:
            stored_at = txn.get(ident, db=self._identity)
            return None if stored_at is None else self._decode_at(txn, sequence_of(stored_at))

        return self._run_read(lookup)

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

        return self._run_read(walk)

    # -- inspection and lifecycle ----------------------------------------------------------

    def map_size(self) -> int:
        self._ensure_open()
        return int(self._env.info()["map_size"])

    def stats(self) -> dict[str, int]:
        """Counts and sizes, for the operator tool and metrics."""

        def collect(txn: Any) -> dict[str, int]:
            pages = 0
            for db in self._dbs.values():
                stat = txn.stat(db)
                pages += stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
            return {
                "events": txn.stat(self._events)["entries"],
                "last_sequence": sequence_of(txn.get(_META_NEXT, db=self._meta)) - 1,
                "used_bytes": pages * self._env.stat()["psize"],
            }

        counts = self._run_read(collect)
        try:
            file_bytes = os.path.getsize(self.path / "data.mdb")
        except OSError:
            file_bytes = 0
        counts.update(
            map_size=self.map_size(),
            map_size_max=self._map_size_max,
            file_bytes=file_bytes,
            resizes=self._resizes,
            schema_version=SCHEMA_VERSION,
        )
        return counts

    def _ensure_open(self) -> None:
        if self._closed:
            raise EventLogClosed(f"the event log at {self.path} is closed")

    def close(self) -> None:
        with self._write_lock, self._rw.exclusive():
            if not self._closed:
                self._closed = True
                self._env.close()
