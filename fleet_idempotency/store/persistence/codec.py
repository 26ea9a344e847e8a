"""Byte encoding of records and tombstones for key-value engines.

Compact JSON arrays: positional (no field names repeated in every record), readable with
any JSON tool when an operator has to look at a raw dump, and fast to decode with the C
JSON parser. Scope and key live in the engine's key, so they are not repeated here. The
layout is versioned by the store's schema version in the meta sub-database.
"""

from __future__ import annotations

import json

from ..keys import split_record_id
from ..records import Record, State, Tombstone

SCHEMA_VERSION = 1

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_decode = json.loads


def encode_record(record: Record) -> bytes:
    return _encoder.encode(
        [
            record.fingerprint,
            int(record.state),
            record.status_code,
            record.result_json,
            record.robot_id,
            record.command_type,
            record.payload_json,
            record.owner,
            record.created_at,
            record.updated_at,
            record.expires_at,
            record.retention_s,
            record.attempt,
        ]
    ).encode("utf-8")


def decode_record(rid: bytes, raw: bytes) -> Record:
    scope, key = split_record_id(rid)
    (fp, state, code, result, robot, ctype, payload, owner, created, updated, expires, ret, att) = (
        _decode(raw)
    )
    return Record(
        scope, key, fp, State(state), code, result, robot, ctype, payload, owner,
        created, updated, expires, ret, att,
    )  # fmt: skip


def encode_tombstone(tombstone: Tombstone) -> bytes:
    return _encoder.encode(
        [
            tombstone.fingerprint,
            int(tombstone.state),
            tombstone.status_code,
            tombstone.command_type,
            tombstone.expired_at,
            tombstone.tombstone_expires_at,
        ]
    ).encode("utf-8")


def decode_tombstone(rid: bytes, raw: bytes) -> Tombstone:
    scope, key = split_record_id(rid)
    fp, state, code, ctype, expired_at, until = _decode(raw)
    return Tombstone(scope, key, fp, State(state), code, ctype, expired_at, until)
