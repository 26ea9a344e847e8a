"""Validation of idempotency keys and scopes.

Keys are client-generated tokens (UUID/ULID recommended, anything printable accepted).
The accepted alphabet is printable ASCII *without space* (0x21..0x7E): a space is
invisible in logs and CLI output and is routinely trimmed by HTTP and YAML layers, so
two clients could send "the same" key that differs only by an invisible character.
"""

from __future__ import annotations

import re

from .errors import InvalidRequest

MAX_TOKEN_LENGTH = 128
_TOKEN = re.compile(r"[\x21-\x7e]{1,128}")
# The record id is "<scope>\x00<key>": NUL can never appear in a valid token, so the
# separator is unambiguous and all keys of one scope are contiguous in the B-tree.
RECORD_ID_SEPARATOR = b"\x00"


def validate_token(field: str, value: object) -> str:
    """Return ``value`` if it is a valid token, else raise InvalidRequest naming ``field``."""
    if not isinstance(value, str):
        raise InvalidRequest(field, f"must be a string, got {type(value).__name__}")
    if _TOKEN.fullmatch(value) is None:
        if not value:
            raise InvalidRequest(field, "must not be empty")
        if len(value) > MAX_TOKEN_LENGTH:
            raise InvalidRequest(
                field, f"is {len(value)} characters long, the limit is {MAX_TOKEN_LENGTH}"
            )
        raise InvalidRequest(
            field,
            "may contain only printable ASCII characters without spaces (0x21..0x7E); "
            "UUIDs and ULIDs are recommended",
        )
    return value


def validate_key(key: object) -> str:
    return validate_token("key", key)


def validate_scope(scope: object) -> str:
    return validate_token("scope", scope)


def record_id(scope: str, key: str) -> bytes:
    """LMDB key of a record: scope and key, both validated, NUL-separated."""
    return scope.encode("ascii") + RECORD_ID_SEPARATOR + key.encode("ascii")


def split_record_id(rid: bytes) -> tuple[str, str]:
    scope, _, key = rid.partition(RECORD_ID_SEPARATOR)
    return scope.decode("ascii"), key.decode("ascii")
