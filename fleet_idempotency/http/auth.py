"""API keys -> client ids: the caller's scope comes from its credentials, never its body.

Keys come from a YAML file (``api_keys_file``) and/or the ``FLEET_IDEM_API_KEYS``
environment variable (``client_id=key,client_id=key``). Each key maps to one client id,
so two callers with different keys can never see or collide with each other's keys.
With no key configured every caller is the local operator (client id ``local``); the
server then binds to localhost only (see ``node.py``).

Keys are kept as SHA-256 digests and compared by digest: a lookup costs the same whatever
prefix of a key a caller guessed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

CLIENT_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"  # the orchestrator's own rule for client ids
API_KEYS_ENV = "FLEET_IDEM_API_KEYS"
LOCAL_CLIENT = "local"


class ApiKeyError(ValueError):
    """An API key configuration that cannot be used; the message names the entry."""


class ApiKeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    client_id: str = Field(pattern=CLIENT_ID_PATTERN)
    key: str = Field(min_length=16, max_length=256)
    # An operator sees every client's events and robots' current keys (the fleet page);
    # a client sees only its own.
    operator: bool = False


class ApiKeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    api_keys: list[ApiKeyEntry] = Field(default_factory=list)


@dataclass(frozen=True)
class Caller:
    client_id: str
    operator: bool

    def owns_robot_key(self, robot_key: str) -> bool:
        """Whether a robot-side key (``<client>:<key>``) belongs to this caller."""
        return self.operator or robot_key.startswith(f"{self.client_id}:")


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    def __init__(self, entries: list[ApiKeyEntry]) -> None:
        self._by_digest: dict[str, Caller] = {}
        for entry in entries:
            digest = _digest(entry.key)
            if digest in self._by_digest:
                raise ApiKeyError(f"API key of {entry.client_id!r} is configured twice")
            self._by_digest[digest] = Caller(entry.client_id, entry.operator)

    @property
    def enabled(self) -> bool:
        return bool(self._by_digest)

    def clients(self) -> list[str]:
        return sorted({caller.client_id for caller in self._by_digest.values()})

    def caller_for(self, authorization: str | None) -> Caller | None:
        """The caller an ``Authorization`` header names; None when it names nobody."""
        if not self.enabled:
            return Caller(LOCAL_CLIENT, operator=True)
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self._by_digest.get(_digest(token.strip()))


def parse_env_keys(value: str) -> list[ApiKeyEntry]:
    entries = []
    for number, item in enumerate(filter(None, (part.strip() for part in value.split(","))), 1):
        client_id, sep, key = item.partition("=")
        if not sep:
            raise ApiKeyError(f"{API_KEYS_ENV} entry {number}: expected client_id=key")
        try:
            entries.append(ApiKeyEntry(client_id=client_id.strip(), key=key.strip()))
        except ValidationError as error:
            raise ApiKeyError(f"{API_KEYS_ENV} entry {number}: {_first_error(error)}") from None
    return entries


def load_api_keys(path: Path | str | None, environ: Mapping[str, str] = os.environ) -> ApiKeys:
    entries: list[ApiKeyEntry] = []
    if path:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text()) or {}
            entries += ApiKeysFile.model_validate(data).api_keys
        except OSError as error:
            raise ApiKeyError(f"{path}: cannot read API keys ({error.strerror})") from None
        except yaml.YAMLError as error:
            raise ApiKeyError(f"{path}: not valid YAML ({error})") from None
        except ValidationError as error:
            raise ApiKeyError(f"{path}: {_first_error(error)}") from None
    entries += parse_env_keys(environ.get(API_KEYS_ENV, ""))
    return ApiKeys(entries)


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"])
    # Never echo the key itself into a log line.
    return re.sub(r"input_value=.*", "", f"{location}: {first['msg']}")
