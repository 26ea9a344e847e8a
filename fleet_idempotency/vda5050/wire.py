"""Topics, headers, timestamps and bounded decoding of VDA 5050 messages.

Topic levels (VDA 5050 2.1 section 6.3, 3.0 section 4.2):
``{interfaceName}/{majorVersion}/{manufacturer}/{serialNumber}/{topic}``.
QoS (2.1 section 6.2): 0 for ``order``, ``instantActions``, ``state``, ``factsheet``; 1 for
``connection``, which is also retained and is the vehicle's last will.

Input from a broker is untrusted: ``decode`` refuses oversized payloads, JSON nested
deeper than a bound (checked on the bytes before parsing), anything that is not a JSON
object, and says why in one line (``BadMessage``), so a caller can count and ignore it.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

TopicName = Literal["order", "instantActions", "state", "connection", "factsheet", "visualization"]
TOPICS: Final[tuple[TopicName, ...]] = (
    "order",
    "instantActions",
    "state",
    "connection",
    "factsheet",
    "visualization",
)
QOS: Final[dict[str, int]] = {str(name): 0 for name in TOPICS} | {"connection": 1}
# Retained: the vehicle's connection state (its last will too) and its factsheet, so a
# master control that subscribes later learns them at once.
RETAINED: Final[frozenset[str]] = frozenset({"connection", "factsheet"})

DEFAULT_MAX_BYTES: Final = 256 * 1024
DEFAULT_MAX_DEPTH: Final = 16


class BadMessage(ValueError):
    """A message from the broker that is not a well-formed VDA 5050 message for us."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason  # a short counter name: not_json, too_deep, too_big, ...


def major_version_of(protocol_version: str) -> str:
    """The topic level of a protocol version: ``2.1.0`` -> ``v2`` (2.1 section 6.3)."""
    return "v" + protocol_version.split(".", 1)[0]


def connection_broken(protocol_version: str) -> str:
    """The last will's connection state: 3.0 renamed CONNECTIONBROKEN."""
    return "CONNECTION_BROKEN" if protocol_version.startswith("3") else "CONNECTIONBROKEN"


def topic(
    interface_name: str, major_version: str, manufacturer: str, serial_number: str, name: str
) -> str:
    return f"{interface_name}/{major_version}/{manufacturer}/{serial_number}/{name}"


def check_topic_level(field: str, value: str) -> str:
    """A topic level must be one non-empty level without MQTT wildcards."""
    if not value or any(c in value for c in "/+#\0"):
        raise ValueError(f"{field} {value!r} cannot be an MQTT topic level")
    return value


def timestamp(now: datetime | None = None) -> str:
    """ISO 8601 in UTC with milliseconds and a Z (e.g. 2017-04-15T11:40:03.120Z)."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class HeaderIds:
    """headerId per topic, incremented by 1 with each sent message (2.1 section 6.4), re-sends
    included.

    With ``path``, ids go on across restarts: the next id of each topic is written there
    (atomically, fsync'd) before the id is handed out, so a restart continues one above the
    last message sent, and a crash between the write and the send skips one id, never
    repeats one. Masters send a few messages a second at most. Without ``path``, a restart
    counts from 0 again, as a vehicle does.
    """

    def __init__(self, path: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._path = path
        self._next: dict[str, int] = {}
        if path is not None and path.exists():
            try:
                stored = json.loads(path.read_text())
                self._next = {str(k): int(v) for k, v in stored.items() if int(v) >= 0}
            except (OSError, ValueError, AttributeError) as error:
                raise ValueError(f"unreadable headerId file {path}: {error}") from None

    def next(self, topic_name: str) -> int:
        with self._lock:
            value = self._next.get(topic_name, 0)
            self._next[topic_name] = value + 1
            if self._path is not None:
                self._save()
            return value

    def _save(self) -> None:
        assert self._path is not None
        self._path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self._path.with_suffix(".tmp")
        with temporary.open("w") as out:
            out.write(json.dumps(self._next, sort_keys=True))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self._path)


def json_depth_exceeds(data: bytes, max_depth: int) -> bool:
    """Whether ``data`` nests arrays/objects deeper than ``max_depth`` (brackets inside
    strings do not count); checked before parsing so deep input never reaches the parser."""
    depth = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > max_depth:
                return True
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return False


def decode(
    payload: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH
) -> dict[str, Any]:
    """The JSON object in ``payload``; BadMessage if it is too big, too deep or not one."""
    if len(payload) > max_bytes:
        raise BadMessage("too_big", f"{len(payload)} bytes > {max_bytes}")
    if json_depth_exceeds(payload, max_depth):
        raise BadMessage("too_deep", f"nested deeper than {max_depth}")
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError) as error:
        raise BadMessage("not_json", str(error)[:120]) from None
    if not isinstance(value, dict):
        raise BadMessage("not_object", type(value).__name__)
    return value


def encode(message: dict[str, Any]) -> bytes:
    """Compact JSON, keys in a fixed order (the caller's): a re-send is byte-identical."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=True).encode()
