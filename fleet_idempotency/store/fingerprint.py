"""Canonical JSON and the command fingerprint.

The fingerprint decides "same operation or not" for a reused key, so it must not depend
on incidental encoding choices of the client: key order and whitespace are normalised,
and values that have no portable JSON form (NaN, Infinity) are refused rather than
silently encoded in a way another implementation would read differently.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .errors import InvalidRequest

# Command payloads are flat objects and results a few levels deep. Python's JSON decoder
# recurses once per level, so a payload of a few thousand nested brackets (10 kB, far
# under any size limit) raises RecursionError deep inside json.loads: the nesting is
# counted before decoding, in one linear pass, and anything deeper is refused.
MAX_JSON_DEPTH = 16
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, non-ASCII kept as UTF-8; NaN/Infinity raise ValueError."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def parse_json_object(field: str, text: object) -> dict[str, Any]:
    """Parse ``text`` as a JSON object, or raise InvalidRequest naming ``field``."""
    parsed = parse_json(field, text)
    if not isinstance(parsed, dict):
        raise InvalidRequest(field, f"must be a JSON object, got JSON {type(parsed).__name__}")
    return parsed


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text``, brackets in strings excluded.

    Linear and recursion-free; for malformed text it may over-count (an unterminated
    string's brackets count), which only turns one 400 into another.
    """
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING_LITERAL.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def parse_json(field: str, text: object, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Decode ``text`` as JSON, bounded in nesting before decoding; NaN/Infinity refused."""
    if not isinstance(text, str):
        raise InvalidRequest(field, f"must be a JSON string, got {type(text).__name__}")
    # Text cannot nest deeper than the brackets it holds: the common case is two C scans.
    openers = text.count("[") + text.count("{")
    if openers > max_depth and (depth := json_depth(text)) > max_depth:
        raise InvalidRequest(
            field, f"is nested {depth} levels deep; at most {max_depth} levels are accepted"
        )
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:  # JSONDecodeError is a ValueError, so is our NaN refusal
        raise InvalidRequest(field, f"is not valid JSON ({exc})") from None


def fingerprint_of(robot_id: str, command_type: str, payload: dict[str, Any]) -> str:
    envelope = {"command_type": command_type, "payload": payload, "robot_id": robot_id}
    return hashlib.sha256(canonical_json(envelope).encode("utf-8")).hexdigest()


def command_fingerprint(robot_id: str, command_type: str, payload_json: str) -> str:
    """SHA-256 hex of the canonical JSON of {robot, command type, parsed payload}."""
    return fingerprint_of(robot_id, command_type, parse_json_object("payload_json", payload_json))
