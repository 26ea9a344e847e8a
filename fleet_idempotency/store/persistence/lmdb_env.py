"""One LMDB environment as this package uses it: the part the key store and the event log share.

Both keep their data in one directory with named sub-databases and a ``meta`` database
holding a format marker and a schema version; both grow the map by doubling up to a
ceiling, adopt a map another process grew, and run writes one at a time per process.
What differs between them is only which exception names each failure, so each passes
its own ``LmdbErrors``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from .rwlock import SharedExclusiveLock

T = TypeVar("T")

META_DB = b"meta"
META_FORMAT = b"format"
META_SCHEMA = b"schema_version"


@dataclass(frozen=True)
class LmdbErrors:
    """How one kind of environment names its failures, and what a user calls it."""

    kind: str  # "store", "event log": appears in every message
    error: type[Exception]  # base: cannot open, not found
    corrupted: type[Exception]
    schema_mismatch: type[Exception]
    full: type[Exception]
    read_only: type[Exception]
    closed: type[Exception]


@dataclass(frozen=True)
class LmdbLayout:
    """The sub-databases and meta entries that make a directory one kind of environment."""

    db_names: tuple[bytes, ...]  # must include META_DB
    format_marker: bytes
    schema_version: int
    # A sub-database whose entries prove the environment is in use (no re-initialising).
    data_db: bytes
    # Meta entries written with the marker when the environment is new, and required after.
    initial_meta: Mapping[bytes, bytes] = field(default_factory=dict)


class LmdbEnvironment:
    """An opened, format-checked environment with map growth and per-process write order.

    Resizing the map invalidates every transaction of the process, so transactions run
    under the shared side of a lock and a resize takes the exclusive side.
    """

    def __init__(
        self,
        path: Path,
        layout: LmdbLayout,
        errors: LmdbErrors,
        *,
        map_size_initial: int,
        map_size_max: int,
        sync: bool,
        metasync: bool,
        readonly: bool,
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.map_size_max = map_size_max
        self.resizes = 0
        self._layout = layout
        self._errors = errors
        self._closed = False
        self._rw = SharedExclusiveLock()
        # One write transaction at a time in this process; LMDB's own lock does the same
        # across processes.
        self._write_lock = threading.Lock()
        self._env = self._open(map_size_initial, sync, metasync)
        try:
            self.page_size: int = self._env.stat()["psize"]
            self.dbs: dict[bytes, Any] = self._open_dbs()
            self._check_format()
        except BaseException:
            self._env.close()
            raise

    # -- opening ---------------------------------------------------------------------------

    def _open(self, map_size_initial: int, sync: bool, metasync: bool) -> Any:
        kind = self._errors.kind
        if self.path.exists() and not self.path.is_dir():
            raise self._errors.corrupted(
                f"{self.path} is a file; a {kind} is a directory holding data.mdb and lock.mdb"
            )
        if self.readonly and not (self.path / "data.mdb").exists():
            raise self._errors.error(f"no {kind} at {self.path} (data.mdb not found)")
        if not self.readonly:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._errors.error(
                    f"cannot create the {kind} directory {self.path}: {exc.strerror}"
                ) from None
        try:
            return lmdb.open(
                str(self.path),
                map_size=map_size_initial,
                subdir=True,
                readonly=self.readonly,
                sync=sync,
                metasync=sync and metasync,
                max_dbs=len(self._layout.db_names) + 2,
                max_readers=256,
                # Point lookups and page-sized scans: readahead would fetch pages nobody
                # asked for and pollute the page cache.
                readahead=False,
                meminit=False,
                lock=True,
            )
        except (lmdb.InvalidError, lmdb.VersionMismatchError, lmdb.CorruptedError) as exc:
            raise self._errors.corrupted(
                f"{self.path} does not hold a readable LMDB {kind} ({exc}); move it aside "
                f"to start a new {kind}, or restore it from a backup"
            ) from None
        except lmdb.Error as exc:
            raise self._errors.error(f"cannot open the {kind} at {self.path}: {exc}") from None

    def _open_dbs(self) -> dict[bytes, Any]:
        names = self._layout.db_names
        with self._env.begin() as txn:
            catalogue = {bytes(name) for name, _ in txn.cursor()}
        if (catalogue - set(names)) or (self.readonly and META_DB not in catalogue):
            found = sorted(name.decode(errors="replace") for name in catalogue)
            raise self._errors.corrupted(
                f"{self.path} is an LMDB environment but not a fleet_idempotency "
                f"{self._errors.kind} (sub-databases found: {found})"
            )
        try:
            if self.readonly:
                return {name: self._env.open_db(name, create=False) for name in names}
            with self._env.begin(write=True) as txn:
                return {name: self._env.open_db(name, txn=txn) for name in names}
        except lmdb.Error as exc:
            raise self._errors.corrupted(
                f"{self.path}: cannot open the {self._errors.kind}'s sub-databases ({exc})"
            ) from None

    def _check_format(self) -> None:
        if self.readonly:
            with self._env.begin() as txn:
                self._check_meta(txn)
            return
        # Check and initialise in one write transaction: two processes opening a new
        # environment at once must not both initialise it after one of them wrote data.
        layout = self._layout
        meta = self.dbs[META_DB]
        with self._env.begin(write=True) as txn:
            untouched = (
                txn.stat(meta)["entries"] == 0
                and txn.stat(self.dbs[layout.data_db])["entries"] == 0
            )
            if untouched:
                txn.put(META_FORMAT, layout.format_marker, db=meta)
                txn.put(META_SCHEMA, str(layout.schema_version).encode(), db=meta)
                for name, value in layout.initial_meta.items():
                    txn.put(name, value, db=meta)
                return
            self._check_meta(txn)

    def _check_meta(self, txn: Any) -> None:
        layout, meta = self._layout, self.dbs[META_DB]
        marker = txn.get(META_FORMAT, db=meta)
        version = txn.get(META_SCHEMA, db=meta)
        required_missing = any(txn.get(name, db=meta) is None for name in layout.initial_meta)
        if marker != layout.format_marker or version is None or required_missing:
            raise self._errors.corrupted(
                f"{self.path} is not a fleet_idempotency {self._errors.kind} "
                "(format marker missing)"
            )
        if bytes(version) != str(layout.schema_version).encode():
            raise self._errors.schema_mismatch(
                f"{self.path} was written with {self._errors.kind} schema version "
                f"{bytes(version).decode(errors='replace')}; this code reads version "
                f"{layout.schema_version}. Use the matching release or migrate the "
                f"{self._errors.kind}."
            )

    # -- transactions ----------------------------------------------------------------------

    def run_write(self, apply: Callable[[Any], T]) -> T:
        """Run ``apply(txn)`` in a write transaction and commit it (fsync'd when durable).

        A transaction that did not fit is aborted, the map grown and ``apply`` run again
        whole, so it must derive everything from the transaction it is given.
        """
        if self.readonly:
            raise self._errors.read_only(
                f"the {self._errors.kind} at {self.path} is open read-only"
            )
        with self._write_lock:
            while True:
                # Held shared from before begin() to the end of the transaction: a reader
                # of this process that adopts a map grown by another process must not
                # resize while this thread waits in begin() for LMDB's writer lock or holds
                # a write transaction. Growing from here re-enters this thread's own slot.
                slot = self._rw.acquire_shared()
                try:
                    self._ensure_open()
                    try:
                        txn = self._env.begin(write=True)
                    except lmdb.MapResizedError:
                        self._adopt_map_size()
                        continue
                    try:
                        result = apply(txn)
                        txn.commit()
                        return result
                    except lmdb.MapFullError:
                        with suppress(lmdb.Error):
                            txn.abort()
                        self._grow()
                    except BaseException:
                        with suppress(lmdb.Error):
                            txn.abort()
                        raise
                finally:
                    slot.release()

    def begin_read(self) -> tuple[Any, threading.RLock]:
        """Open a snapshot under the shared lock; ``end_read`` must follow.

        A pair of calls rather than a context manager: this runs on every duplicate check,
        where generator-based context managers were a measurable share.
        """
        while True:
            slot = self._rw.acquire_shared()
            try:
                self._ensure_open()
                txn = self._env.begin(buffers=False)
            except lmdb.MapResizedError:
                slot.release()
                self._adopt_map_size()
                continue
            except BaseException:
                slot.release()
                raise
            return txn, slot

    @staticmethod
    def end_read(txn: Any, slot: threading.RLock) -> None:
        try:
            with suppress(lmdb.Error):
                txn.abort()
        finally:
            slot.release()

    def run_read(self, apply: Callable[[Any], T]) -> T:
        txn, slot = self.begin_read()
        try:
            return apply(txn)
        finally:
            self.end_read(txn, slot)

    def _adopt_map_size(self) -> None:
        # Another process grew the map: size 0 asks LMDB to adopt the size in the file.
        with self._rw.exclusive():
            self._env.set_mapsize(0)

    def _grow(self) -> None:
        current = self.map_size()
        if current >= self.map_size_max:
            raise self._errors.full(
                f"the {self._errors.kind} at {self.path} reached map_size_max "
                f"({self.map_size_max} bytes); nothing was written"
            )
        with self._rw.exclusive():
            self._env.set_mapsize(min(self.map_size_max, current * 2))
        self.resizes += 1

    # -- inspection and lifecycle ----------------------------------------------------------

    def map_size(self) -> int:
        self._ensure_open()
        return int(self._env.info()["map_size"])

    def used_pages(self, txn: Any) -> tuple[int, dict[bytes, int]]:
        """Pages in use and entries per sub-database, as seen by ``txn``."""
        pages = 0
        entries: dict[bytes, int] = {}
        for name, db in self.dbs.items():
            stat = txn.stat(db)
            pages += stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
            entries[name] = stat["entries"]
        # +2 meta pages and the main (catalogue) database: tiny, counted for honesty.
        return pages + 3, entries

    def file_bytes(self) -> int:
        try:
            return (self.path / "data.mdb").stat().st_size
        except OSError:
            return 0

    def _ensure_open(self) -> None:
        if self._closed:
            raise self._errors.closed(f"the {self._errors.kind} at {self.path} is closed")

    def close(self) -> None:
        with self._write_lock, self._rw.exclusive():
            if not self._closed:
                self._closed = True
                self._env.close()
