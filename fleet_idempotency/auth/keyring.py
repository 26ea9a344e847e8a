"""Keyrings: the fleet's master keys and each robot's own keys derived from them.

The orchestrator holds the fleet keyring (master keys by key id, one of them active).
A robot holds only its own keys, ``HMAC(master, "fleet_idempotency/robot/" + robot_id)``
for each key id: a robot that is stolen or compromised reveals nothing that would let
anyone command another robot. Rotation needs no downtime: add a key (robots get its
derived key first), activate it (the orchestrator signs with it from then on), and
retire the old one once no command signed with it can still be in flight.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from pathlib import Path
from typing import Generic, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

KEY_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,32}$"
_HEX_KEY = r"^[0-9a-f]{64}$"  # 32 bytes: SHA-256's block-size-safe key length
_DERIVATION_LABEL = b"fleet_idempotency/robot/"


class KeyringError(ValueError):
    """A keyring that cannot be read, or an operation on it that makes no sense."""


def derive_robot_key(master_hex: str, robot_id: str) -> str:
    return hmac.new(
        bytes.fromhex(master_hex), _DERIVATION_LABEL + robot_id.encode(), hashlib.sha256
    ).hexdigest()


class _Keyring(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(default=1, ge=1, le=1)
    keys: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _well_formed(self) -> Self:
        for key_id, value in self.keys.items():
            if not re.fullmatch(KEY_ID_PATTERN, key_id):
                raise ValueError(f"key id {key_id!r} must match {KEY_ID_PATTERN}")
            if not re.fullmatch(_HEX_KEY, value):
                raise ValueError(f"key {key_id!r} must be 64 lower-case hex digits (32 bytes)")
        return self

    @classmethod
    def load(cls, path: Path) -> Self:
        try:
            return cls.model_validate_json(Path(path).read_bytes())
        except OSError as error:
            raise KeyringError(f"cannot read the keyring {path}: {error.strerror}") from None
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "file"
            raise KeyringError(f"keyring {path} is invalid ({where}: {first['msg']})") from None

    def save(self, path: Path) -> None:
        """Written to a temporary file 0600 and renamed: never half a keyring, never readable
        by other users."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)


class FleetKeyring(_Keyring):
    active: str = ""

    @model_validator(mode="after")
    def _active_is_known(self) -> Self:
        if self.active and self.active not in self.keys:
            raise ValueError(f"active key {self.active!r} is not among the keys")
        return self

    @classmethod
    def generate(cls, key_id: str = "k1") -> FleetKeyring:
        return cls(keys={key_id: secrets.token_hex(32)}, active=key_id)

    def add(self, key_id: str, *, activate: bool = False) -> FleetKeyring:
        if key_id in self.keys:
            raise KeyringError(f"key {key_id!r} already exists")
        keys = {**self.keys, key_id: secrets.token_hex(32)}
        return FleetKeyring(keys=keys, active=key_id if activate else self.active)

    def activate(self, key_id: str) -> FleetKeyring:
        if key_id not in self.keys:
            raise KeyringError(f"no key {key_id!r} to activate (have: {sorted(self.keys)})")
        return FleetKeyring(keys=dict(self.keys), active=key_id)

    def retire(self, key_id: str) -> FleetKeyring:
        if key_id == self.active:
            raise KeyringError(f"key {key_id!r} is active: activate another one first")
        if key_id not in self.keys:
            raise KeyringError(f"no key {key_id!r} to retire")
        return FleetKeyring(
            keys={k: v for k, v in self.keys.items() if k != key_id}, active=self.active
        )

    def for_robot(self, robot_id: str) -> RobotKeyring:
        return RobotKeyring(
            robot_id=robot_id,
            keys={
                key_id: derive_robot_key(master, robot_id) for key_id, master in self.keys.items()
            },
        )


class RobotKeyring(_Keyring):
    robot_id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")


K = TypeVar("K", bound=_Keyring)


class WatchedKeyring(Generic[K]):
    """A keyring file that nodes re-read when it changes, so rotation needs no restart.

    A changed file that does not parse keeps the keys in force (a half-edited keyring must
    not lock the fleet out) and is reported by ``refresh`` raising KeyringError.
    """

    def __init__(self, path: Path, kind: type[K]) -> None:
        self.path = Path(path)
        self._kind = kind
        self._stamp = self._file_stamp()
        self.keyring: K = kind.load(self.path)

    def _file_stamp(self) -> tuple[int, int, int]:
        try:
            stat = self.path.stat()
        except OSError as error:
            raise KeyringError(f"cannot read the keyring {self.path}: {error.strerror}") from None
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def refresh(self) -> K | None:
        """The new keyring if the file changed since the last look, else None."""
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        self.keyring = self._kind.load(self.path)
        return self.keyring
