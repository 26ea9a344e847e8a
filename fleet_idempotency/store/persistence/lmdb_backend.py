"""LMDB implementation of the persistence interface.

One environment directory (opened through ``lmdb_env``), six named sub-databases:

- ``records``    scope NUL key -> record (codec.encode_record)
- ``tombstones`` scope NUL key -> tombstone
- ``rec_expiry`` u64be(ceil(expires_at ms)) + record id -> b""   (GC reads only the head)
- ``tomb_expiry`` same ordering for tombstones
- ``in_flight``  record id -> b""   (recovery reads only claims that are not final)
- ``meta``       format marker and schema version
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ReadOnlyStore, SchemaMismatch, StoreClosed, StoreCorrupted, StoreError
from ..keys import record_id
from ..records import Record, Tombstone
from .base import CapacityExhausted, PersistenceBackend, ReadView, StoreCounts, WriteView
from .codec import (
    FORMAT_MARKER,
    SCHEMA_VERSION,
    decode_record,
    decode_record_as,
    decode_tombstone,
    decode_tombstone_as,
    encode_record,
    encode_tombstone,
)
from .lmdb_env import META_DB, LmdbEnvironment, LmdbErrors, LmdbLayout

T = TypeVar("T")
E = TypeVar("E")

_LAYOUT = LmdbLayout(
    (b"records", b"tombstones", b"rec_expiry", b"tomb_expiry", b"in_flight", META_DB),
    FORMAT_MARKER, SCHEMA_VERSION, data_db=b"records",
)  # fmt: skip
_ERRORS = LmdbErrors(
    "store", StoreError, StoreCorrupted, SchemaMismatch, CapacityExhausted, ReadOnlyStore,
    StoreClosed,
)  # fmt: skip
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

    def used_bytes(self) -> int:
        return self._b.env.used_pages(self._txn)[0] * self._b.page_size

    def counts(self) -> StoreCounts:
        used_pages, entries = self._b.env.used_pages(self._txn)
        used_bytes = used_pages * self._b.page_size
        file_bytes = self._b.env.file_bytes()
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

    def _expired(
        self,
        index_db: Any,
        data_db: Any,
        decode: Callable[[bytes, bytes], E],
        now: float,
        limit: int,
    ) -> list[E]:
        # The index is ordered by expiry time: only its head is read, never the whole store.
        now_ms = math.floor(now * 1000.0)
        found: list[E] = []
        with self._txn.cursor(db=index_db) as cursor:
            for index_key in cursor.iternext(keys=True, values=False):
                if _EXPIRY_PREFIX.unpack_from(index_key)[0] > now_ms or len(found) >= limit:
                    break
                rid = bytes(index_key[_EXPIRY_PREFIX.size :])
                raw = self._txn.get(rid, db=data_db)
                if raw is not None:
                    found.append(decode(rid, raw))
        return found

    def expired_records(self, now: float, limit: int) -> list[Record]:
        return self._expired(self._b.db_rec_expiry, self._b.db_records, decode_record, now, limit)

    def expired_tombstones(self, now: float, limit: int) -> list[Tombstone]:
        b = self._b
        return self._expired(b.db_tomb_expiry, b.db_tombstones, decode_tombstone, now, limit)

    def put_meta(self, name: str, value: bytes) -> None:
        self._txn.put(name.encode("ascii"), value, db=self._b.db_meta)


class _ReadSnapshot(AbstractContextManager[ReadView]):
    __slots__ = ("_backend", "_slot", "_view")

    def __init__(self, backend: LmdbBackend) -> None:
        self._backend = backend

    def __enter__(self) -> ReadView:
        txn, self._slot = self._backend.env.begin_read()
        self._view = _LmdbReadView(self._backend, txn)
        return self._view

    def __exit__(self, *exc_info: object) -> None:
        LmdbEnvironment.end_read(self._view.txn, self._slot)


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
        self.env = LmdbEnvironment(
            self.path,
            _LAYOUT,
            _ERRORS,
            map_size_initial=map_size_initial,
            map_size_max=map_size_max,
            sync=durable,
            metasync=metasync,
            readonly=readonly,
        )
        self.page_size = self.env.page_size
        self.dbs = self.env.dbs
        self.db_records = self.dbs[b"records"]
        self.db_tombstones = self.dbs[b"tombstones"]
        self.db_rec_expiry = self.dbs[b"rec_expiry"]
        self.db_tomb_expiry = self.dbs[b"tomb_expiry"]
        self.db_in_flight = self.dbs[b"in_flight"]
        self.db_meta = self.dbs[META_DB]

    def map_size(self) -> int:
        return self.env.map_size()

    def resize_count(self) -> int:
        return self.env.resizes

    def read(self) -> AbstractContextManager[ReadView]:
        # A plain class rather than a generator context manager: this runs on every
        # duplicate check, where the generator machinery was a measurable share.
        return _ReadSnapshot(self)

    def run_write(self, apply: Callable[[WriteView], T]) -> T:
        return self.env.run_write(lambda txn: apply(_LmdbWriteView(self, txn)))

    def close(self) -> None:
        self.env.close()
