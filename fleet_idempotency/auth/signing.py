"""The canonical bytes of a command, its HMAC-SHA256 tag, and checking it on the robot.

Covered: every field that decides what the robot does or for whom (key id, robot, client,
idempotency key, command type, payload, attempt, fencing token), each length-prefixed so no two
different commands share an encoding. Not covered on purpose: ``payload_sha256`` (the
robot recomputes it) and ``issued_at``. A captured command replayed later proves nothing
new: its key makes it a duplicate, answered from the store. What the tag stops is a
command nobody with the key wrote: a forged one, or a real one retargeted or altered.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from enum import Enum
from functools import lru_cache

from fleet_idempotency.protocol import Delivery

from .keyring import FleetKeyring, RobotKeyring, derive_robot_key

_DOMAIN = b"fleet_idempotency.command.v2"
_LENGTH = struct.Struct(">I")


def canonical_command_bytes(key_id: str, delivery: Delivery) -> bytes:
    fields = (
        key_id,
        delivery.robot_id,
        delivery.client_id,
        delivery.key,
        delivery.command_type,
        delivery.payload_json,
        str(delivery.attempt),
        # Signed so that no one without the key can lift a stale replica's command over
        # the robot's fence.
        str(delivery.fencing_token),
    )
    parts = [_DOMAIN]
    for value in fields:
        encoded = value.encode("utf-8", errors="surrogatepass")
        parts += [_LENGTH.pack(len(encoded)), encoded]
    return b"".join(parts)


def _tag(key_hex: str, key_id: str, delivery: Delivery) -> str:
    return hmac.new(
        bytes.fromhex(key_hex), canonical_command_bytes(key_id, delivery), hashlib.sha256
    ).hexdigest()


class CommandSigner:
    """The orchestrator's side: tags each delivery with the active key for its robot."""

    def __init__(self, keyring: FleetKeyring) -> None:
        if not keyring.active:
            raise ValueError("the fleet keyring has no active key to sign with")
        self.key_id = keyring.active
        master = keyring.keys[keyring.active]
        self._robot_key = lru_cache(maxsize=4096)(
            lambda robot_id: derive_robot_key(master, robot_id)
        )

    def sign(self, delivery: Delivery) -> tuple[str, str]:
        """(key id, tag) for ``delivery``."""
        return self.key_id, _tag(self._robot_key(delivery.robot_id), self.key_id, delivery)


class Verdict(Enum):
    AUTHENTIC = "authentic"
    UNSIGNED = "unsigned"
    UNKNOWN_KEY = "signed with a key this robot does not hold"
    BAD_TAG = "the tag does not match the command"


class CommandVerifier:
    """The robot's side: any key of its keyring is accepted (rotation overlaps keys)."""

    def __init__(self, keyring: RobotKeyring) -> None:
        self.robot_id = keyring.robot_id
        self._keys = dict(keyring.keys)

    def verify(self, delivery: Delivery, key_id: str, tag: str) -> Verdict:
        if not key_id and not tag:
            return Verdict.UNSIGNED
        key = self._keys.get(key_id)
        if key is None:
            return Verdict.UNKNOWN_KEY
        # Compared as bytes: on str, compare_digest raises TypeError for any non-ASCII
        # character, and the tag is whatever the sender put there.
        expected = _tag(key, key_id, delivery).encode()
        if not hmac.compare_digest(expected, tag.lower().encode("utf-8", "replace")):
            return Verdict.BAD_TAG
        return Verdict.AUTHENTIC
