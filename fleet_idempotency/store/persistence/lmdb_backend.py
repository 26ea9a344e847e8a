"""LMDB implementation of the persistence interface.

One environment directory, five named sub-databases:

- ``records``    scope NUL key -> record (codec.encode_record)
- ``tombstones`` scope NUL key -> tombstone
- ``rec_expiry`` u64be(ceil(expires_at ms)) + record id -> b""   (GC reads only the head)
- ``tomb_expiry`` same ordering for tombstones
- ``in_flight``  record id -> b""   (recovery reads only claims that are not final)
- ``meta``       format marker and schema version
"""

from __future__ import annotations

import math
import os
import struct
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from ..errors import ReadOnlyStore, SchemaMismatch, StoreCorrupted, StoreError
from ..keys import record_id
from ..records import Record, Tombstone
from .base import CapacityExhausted, PersistenceBackend, ReadView, StoreCounts, WriteView
from .codec import (
    SCHEMA_VERSION,
    decode_record,
    decode_record_as,
    decode_tombstone,
    decode_tombstone_as,
    encode_record,
    encode_tombstone,
)
from .rwlock import SharedExclusiveLock

T = TypeVar("T")

FORMAT_MARKER = b"fleet_idempotency.store"
_DB_NAMES = (b"records", b"tombstones", b"rec_expiry", b"tomb_expiry", b"in_flight", b"meta")
_EXPIRY_PREFIX = struct.Struct(">Q")
_EMPTY = b""


def _expiry_ms(epoch_s: float) -> int:
    # Rounded up so that "index time <= now" implies "expires_at <= now": GC never picks an
    # entry that is not yet expired and then has to skip it on every later scan.
    return max(0, math.ceil(epoch_s * 1000.0))


def _expiry_key(epoch_s: float, rid: bytes) -> bytes:
    return _EXPIRY_PREFIX.pack(_expiry_ms(epoch_s)) + rid


def _after_key(after: tuple[str, str] | None) -> bytes:
    # The smallest key strictly greater than record_id(after): append a NUL byte.
    return _EMPTY if after is None else record_id(*after) + b"\x00"


class _LmdbReadView(ReadView):
    __slots__ = ("_b", "_txn")

    def __init__(self, backend: LmdbBackend, txn: Any) -> None:
        self._b = backend
        self._txn = txn

    @property
    def txn(self) -> Any:
        return self._txn

    def get_record(self, scope: str, key: str) -> Record | None:
        raw = self._txn.get(record_id(scope, key), db=self._b.db_records)
        # Scope and key are known here: no need to split them back out of the LMDB key.
        return None if raw is None else decode_record_as(scope, key, raw)

    def get_tombstone(self, scope: str, key: str) -> Tombstone | None:
        raw = self._txn.get(record_id(scope, key), db=self._b.db_tombstones)
        return None if raw is None else decode_tombstone_as(scope, key, raw)

    def scan_records(self, after: tuple[str, str] | None, limit: int) -> list[Record]:
        return [decode_record(k, v) for k, v in self._scan(self._b.db_records, after, limit)]

    def scan_tombstones(self, after: tuple[str, str] | None, limit: int) -> list[Tombstone]:
        return [decode_tombstone(k, v) for k, v in self._scan(self._b.db_tombstones, after, limit)]

    def _scan(
        self, db: Any, after: tuple[str, str] | None, limit: int
    ) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        with self._txn.cursor(db=db) as cursor:
            if not cursor.set_range(_after_key(after)):
                return out
            for k, v in cursor:
                out.append((bytes(k), bytes(v)))
                if len(out) >= limit:
                    break
        return out

    def in_flight_records(self) -> list[Record]:
        found: list[Record] = []
        with self._txn.cursor(db=self._b.db_in_flight) as cursor:
            for rid in cursor.iternext(keys=True, values=False):
                raw = self._txn.get(rid, db=self._b.db_records)
                if raw is not None:
                    found.append(decode_record(bytes(rid), raw))
        return found

    def _page_counts(self) -> tuple[int, dict[bytes, int]]:
        used_pages = 0
        entries: dict[bytes, int] = {}
        for name, db in self._b.dbs.items():
            stat = self._txn.stat(db)
            used_pages += stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
            entries[name] = stat["entries"]
        # +2 meta pages and the main (catalogue) database: tiny, counted for honesty.
        return used_pages + 3, entries

    def used_bytes(self) -> int:
        return self._page_counts()[0] * self._b.page_size

    def counts(self) -> StoreCounts:
        used_pages, entries = self._page_counts()
        used_bytes = used_pages * self._b.page_size
        try:
            file_bytes = os.path.getsize(self._b.path / "data.mdb")
        except OSError:
            file_bytes = 0
        return StoreCounts(
            records=entries[b"records"],
            tombstones=entries[b"tombstones"],
            in_flight=entries[b"in_flight"],
            used_bytes=used_bytes,
            map_size=self._b.map_size(),
            file_bytes=file_bytes,
        )

    def get_meta(self, name: str) -> bytes | None:
        raw = self._txn.get(name.encode("ascii"), db=self._b.db_meta)
        return None if raw is None else bytes(raw)


class _LmdbWriteView(_LmdbReadView, WriteView):
    def put_record(self, record: Record, previous: Record | None) -> None:
        b, txn = self._b, self._txn
        rid = record_id(record.scope, record.key)
        if previous is not None and _expiry_ms(previous.expires_at) != _expiry_ms(
            record.expires_at
        ):
            txn.delete(_expiry_key(previous.expires_at, rid), db=b.db_rec_expiry)
        txn.put(rid, encode_record(record), db=b.db_records)
        txn.put(_expiry_key(record.expires_at, rid), _EMPTY, db=b.db_rec_expiry)
        if record.state.is_in_flight:
            txn.put(rid, _EMPTY, db=b.db_in_flight)
        elif previous is None or previous.state.is_in_flight:
            txn.delete(rid, db=b.db_in_flight)

    def delete_record(self, record: Record) -> None:
        b, txn = self._b, self._txn
        rid = record_id(record.scope, record.key)
        txn.delete(rid, db=b.db_records)
        txn.delete(_expiry_key(record.expires_at, rid), db=b.db_rec_expiry)
        txn.delete(rid, db=b.db_in_flight)

    def put_tombstone(self, tombstone: Tombstone, previous: Tombstone | None) -> None:
        b, txn = self._b, self._txn
        rid = record_id(tombstone.scope, tombstone.key)
        if previous is not None:
            txn.delete(_expiry_key(previous.tombstone_expires_at, rid), db=b.db_tomb_expiry)
        txn.put(rid, encode_tombstone(tombstone), db=b.db_tombstones)
        txn.put(_expiry_key(tombstone.tombstone_expires_at, rid), _EMPTY, db=b.db_tomb_expiry)

    def delete_tombstone(self, tombstone: Tombstone) -> None:
        b, txn = self._b, self._txn
        rid = record_id(tombstone.scope, tombstone.key)
        txn.delete(rid, db=b.db_tombstones)
        txn.delete(_expiry_key(tombstone.tombstone_expires_at, rid), db=b.db_tomb_expiry)

    def _expired_ids(self, index_db: Any, now: float, limit: int) -> list[bytes]:
        now_ms = math.floor(now * 1000.0)
        ids: list[bytes] = []
        with self._txn.cursor(db=index_db) as cursor:
            for index_key in cursor.iternext(keys=True, values=False):
                if _EXPIRY_PREFIX.unpack_from(index_key)[0] > now_ms or len(ids) >= limit:
                    break
                ids.append(bytes(index_key[_EXPIRY_PREFIX.size :]))
        return ids

    def expired_records(self, now: float, limit: int) -> list[Record]:
        out: list[Record] = []
        for rid in self._expired_ids(self._b.db_rec_expiry, now, limit):
            raw = self._txn.get(rid, db=self._b.db_records)
            if raw is not None:
                out.append(decode_record(rid, raw))
        return out

    def expired_tombstones(self, now: float, limit: int) -> list[Tombstone]:
        out: list[Tombstone] = []
        for rid in self._expired_ids(self._b.db_tomb_expiry, now, limit):
            raw = self._txn.get(rid, db=self._b.db_tombstones)
            if raw is not None:
                out.append(decode_tombstone(rid, raw))
        return out

    def put_meta(self, name: str, value: bytes) -> None:
        self._txn.put(name.encode("ascii"), value, db=self._b.db_meta)


class _ReadSnapshot(AbstractContextManager[ReadView]):
    __slots__ = ("_backend", "_slot", "_view")

    def __init__(self, backend: LmdbBackend) -> None:
        self._backend = backend

    def __enter__(self) -> ReadView:
        self._view, self._slot = self._backend.begin_read()
        return self._view

    def __exit__(self, *exc_info: object) -> None:
        LmdbBackend.end_read(self._view, self._slot)


class LmdbBackend(PersistenceBackend):
    """An LMDB environment holding one store. Open one instance per process and path."""

    def __init__(
        self,
        path: Path,
        *,
        map_size_initial: int,
        map_size_max: int,
        durable: bool,
        metasync: bool,
        readonly: bool = False,
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._map_size_max = map_size_max
        self._resizes = 0
        self._rw = SharedExclusiveLock()
        self._write_lock = threading.Lock()
        self._env = self._open_env(map_size_initial, durable, metasync)
        try:
            self.page_size: int = self._env.stat()["psize"]
            self.dbs = self._open_dbs()
            self._check_schema()
        except BaseException:
            self._env.close()
            raise
        self.db_records = self.dbs[b"records"]
        self.db_tombstones = self.dbs[b"tombstones"]
        self.db_rec_expiry = self.dbs[b"rec_expiry"]
        self.db_tomb_expiry = self.dbs[b"tomb_expiry"]
        self.db_in_flight = self.dbs[b"in_flight"]
        self.db_meta = self.dbs[b"meta"]

    # -- opening -----------------------------------------------------------------------

    def _open_env(self, map_size_initial: int, durable: bool, metasync: bool) -> Any:
        if self.path.exists() and not self.path.is_dir():
            raise StoreCorrupted(
                f"{self.path} is a file; a store is a directory holding data.mdb and lock.mdb"
            )
        if self.readonly and not (self.path / "data.mdb").exists():
            raise StoreError(f"no store at {self.path} (data.mdb not found)")
        if not self.readonly:
            self.path.mkdir(parents=True, exist_ok=True)
        try:
            return lmdb.open(
                str(self.path),
                map_size=map_size_initial,
                subdir=True,
                readonly=self.readonly,
                sync=durable,
                metasync=durable and metasync,
                max_dbs=len(_DB_NAMES) + 2,
                max_readers=256,
                # Random point lookups: readahead would only pollute the page cache.
                readahead=False,
                meminit=False,
                lock=True,
            )
        except (lmdb.InvalidError, lmdb.VersionMismatchError, lmdb.CorruptedError) as exc:
            raise StoreCorrupted(
                f"{self.path} does not hold a readable LMDB store ({exc}); move it aside "
                "and restart to create a fresh store, or restore it from a backup"
            ) from None
        except lmdb.Error as exc:
            raise StoreError(f"cannot open the store at {self.path}: {exc}") from None

    def _open_dbs(self) -> dict[bytes, Any]:
        with self._env.begin() as txn:
            catalogue = {bytes(k) for k, _ in txn.cursor()}
        foreign = catalogue - set(_DB_NAMES)
        if foreign or (self.readonly and b"meta" not in catalogue):
            raise StoreCorrupted(
                f"{self.path} is an LMDB environment but not a fleet_idempotency store "
                f"(sub-databases found: {sorted(n.decode(errors='replace') for n in catalogue)})"
            )
        try:
            if self.readonly:
                return {n: self._env.open_db(n, create=False) for n in _DB_NAMES}
            with self._env.begin(write=True) as txn:
                return {n: self._env.open_db(n, txn=txn) for n in _DB_NAMES}
        except lmdb.Error as exc:
            raise StoreCorrupted(
                f"{self.path}: cannot open the store's sub-databases ({exc})"
            ) from None

    def _check_schema(self) -> None:
        meta = self.dbs[b"meta"]
        with self._env.begin() as txn:
            marker = txn.get(b"format", db=meta)
            version = txn.get(b"schema_version", db=meta)
            has_records = txn.stat(self.dbs[b"records"])["entries"] > 0
        if marker is None and version is None and not has_records and not self.readonly:
            with self._env.begin(write=True) as txn:
                txn.put(b"format", FORMAT_MARKER, db=meta)
                txn.put(b"schema_version", str(SCHEMA_VERSION).encode(), db=meta)
            return
        if marker != FORMAT_MARKER or version is None:
            raise StoreCorrupted(
                f"{self.path} is not a fleet_idempotency store (format marker missing)"
            )
        if version != str(SCHEMA_VERSION).encode():
            raise SchemaMismatch(
                f"{self.path} was written with store schema version "
                f"{bytes(version).decode(errors='replace')}; this code reads version "
                f"{SCHEMA_VERSION}. Use the matching release or migrate the store."
            )

    # -- transactions --------------------------------------------------------------------

    def map_size(self) -> int:
        return int(self._env.info()["map_size"])

    def resize_count(self) -> int:
        return self._resizes

    def _adopt_map_size(self) -> None:
        # Another process grew the map: size 0 asks LMDB to adopt the size in the file.
        with self._rw.exclusive():
            self._env.set_mapsize(0)

    def _grow(self) -> bool:
        current = self.map_size()
        if current >= self._map_size_max:
            return False
        with self._rw.exclusive():
            self._env.set_mapsize(min(self._map_size_max, current * 2))
        self._resizes += 1
        return True

    def read(self) -> AbstractContextManager[ReadView]:
        # A plain class rather than a generator context manager: this runs on every
        # duplicate check, where the generator machinery was a measurable share.
        return _ReadSnapshot(self)

    def begin_read(self) -> tuple[_LmdbReadView, threading.RLock]:
        """Open a snapshot under the shared lock; ``end_read`` must follow."""
        while True:
            slot = self._rw.acquire_shared()
            try:
                txn = self._env.begin(buffers=False)
            except lmdb.MapResizedError:
                slot.release()
                self._adopt_map_size()
                continue
            except BaseException:
                slot.release()
                raise
            return _LmdbReadView(self, txn), slot

    @staticmethod
    def end_read(view: _LmdbReadView, slot: threading.RLock) -> None:
        try:
            with suppress(lmdb.Error):
                view.txn.abort()
        finally:
            slot.release()

    def run_write(self, apply: Callable[[WriteView], T]) -> T:
        if self.readonly:
            raise ReadOnlyStore(f"the store at {self.path} is open read-only")
        with self._write_lock:
            while True:
                # Held shared from before begin() to the end of the transaction: a reader of
                # this process that adopts a map grown by another process must not resize
                # while this thread waits in begin() for LMDB's writer lock or holds a write
                # transaction. Growing from here re-enters this thread's own slot.
                slot = self._rw.acquire_shared()
                try:
                    try:
                        txn = self._env.begin(write=True)
                    except lmdb.MapResizedError:
                        self._adopt_map_size()
                        continue
                    try:
                        result = apply(_LmdbWriteView(self, txn))
                        txn.commit()
                        return result
                    except lmdb.MapFullError:
                        with suppress(lmdb.Error):
                            txn.abort()
                        if not self._grow():
                            raise CapacityExhausted(
                                f"the store at {self.path} reached map_size_max "
                                f"({self._map_size_max} bytes)"
                            ) from None
                    except BaseException:
                        with suppress(lmdb.Error):
                            txn.abort()
                        raise
                finally:
                    slot.release()

    def close(self) -> None:
        with self._write_lock, self._rw.exclusive():
            self._env.close()
