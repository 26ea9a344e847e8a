"""Byte encoding of events and index keys for LMDB.

Values are compact positional JSON arrays, like the store's records: readable in a raw
dump, decoded by the C JSON parser. The sequence lives in the LMDB key, not the value.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from .model import EventLogCorrupted, EventLogError, FleetEventRecord, Identity, check_json_object

SCHEMA_VERSION = 1
FORMAT_MARKER = b"fleet_idempotency.event_log"

# Big-endian so that LMDB's byte order is sequence order: reads and the (client, key)
# index are plain cursor walks.
_U64 = struct.Struct(">Q")
# LMDB's default maximum key size.
MAX_KEY_BYTES = 511
_SEPARATOR = "\x00"
_FIELD_COUNT = 7


def sequence_key(sequence: int) -> bytes:
    return _U64.pack(sequence)


def sequence_of(raw: bytes) -> int:
    value: int = _U64.unpack(raw)[0]
    return value


def identity_key(identity: Identity) -> bytes:
    # NUL cannot appear in a field (checked on append), so the joined key is unambiguous.
    return _SEPARATOR.join(identity).encode("utf-8")


def key_prefix(client_id: str, key: str) -> bytes:
    # The trailing NUL keeps client "a" key "b" from matching key "bc" in a prefix scan.
    return f"{client_id}{_SEPARATOR}{key}{_SEPARATOR}".encode()


def by_key_entry(client_id: str, key: str, sequence: int) -> bytes:
    return key_prefix(client_id, key) + _U64.pack(sequence)


def check_appendable(event: FleetEventRecord) -> None:
    """Everything that can make an append fail, checked before any transaction starts."""
    # robot_id is in no index key, but PostgreSQL text cannot hold NUL: refused here, every
    # backend accepts the same events.
    for name in ("client_id", "key", "discriminator", "robot_id"):
        if _SEPARATOR in getattr(event, name):
            raise EventLogError(f"{name} must not contain a NUL character")
    longest = max(len(identity_key(event.identity)), len(key_prefix(event.client_id, event.key)))
    if longest + _U64.size > MAX_KEY_BYTES:
        raise EventLogError(
            f"client_id, key, event_type and discriminator together are too long for the "
            f"log's index (at most about {MAX_KEY_BYTES - _U64.size} UTF-8 bytes)"
        )
    check_json_object(event.detail)


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_event(event: FleetEventRecord) -> bytes:
    return _encoder.encode(
        [
            event.event_type.value,
            event.client_id,
            event.key,
            event.robot_id,
            event.discriminator,
            event.stamp,
            event.detail,
        ]
    ).encode("utf-8")


def decode_event(sequence: int, raw: bytes) -> FleetEventRecord:
    try:
        fields: Any = json.loads(bytes(raw))
        if not isinstance(fields, list) or len(fields) != _FIELD_COUNT:
            raise ValueError(f"expected a {_FIELD_COUNT}-element array")
        event_type, client_id, key, robot_id, discriminator, stamp, detail = fields
        return FleetEventRecord(
            event_type=event_type,
            client_id=client_id,
            key=key,
            robot_id=robot_id,
            detail=detail,
            stamp=stamp,
            discriminator=discriminator,
            sequence=sequence,
        )
    except (ValueError, EventLogError) as exc:
        raise EventLogCorrupted(f"event {sequence} cannot be decoded: {exc}") from None
