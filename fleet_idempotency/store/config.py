"""Configuration of one store: an LMDB environment directory, or a PostgreSQL schema."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MiB = 1024 * 1024

ExpiredKeyPolicy = Literal["reject", "new"]
# resume: re-run (absolute moves end in the same place); interrupt: INTERRUPTED, final;
# reconcile: re-owned and handed to the caller to ask the robot what became of it,
# never re-run (a backend that can read the outcome from the robot, e.g. VDA 5050).
RecoveryPolicy = Literal["resume", "interrupt", "reconcile"]

_DEFAULT_RECOVERY_POLICIES: dict[str, RecoveryPolicy] = {"move_to_waypoint": "resume"}
# Lower case only: PostgreSQL folds unquoted names, so "Fleet" and "fleet" would be two
# schemas to the store but look like one to an operator typing them into psql.
_PG_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class StoreConfig(BaseModel):
    """Validated, immutable store settings; pydantic errors name the offending field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Exactly one of the two: an LMDB directory (embedded, the default on robots) or a
    # postgresql:// URL (shared by orchestrator replicas).
    path: Path | None = None
    url: str | None = None
    # Schema holding the PostgreSQL tables, so that several stores can share one database.
    pg_schema: str = "fleet_idem_store"
    # How long a call waits for a PostgreSQL connection before raising StoreUnavailable.
    pg_timeout_s: float = Field(default=5.0, gt=0, le=600)
    map_size_initial: int = Field(default=8 * MiB, ge=64 * 1024)
    map_size_max: int = Field(default=1024 * MiB, ge=64 * 1024)
    # Share of map_size_max kept free for finish/release/GC once claims are refused: a robot
    # that cannot record the result of a command it already executed is worse than one that
    # refuses new work.
    headroom_fraction: float = Field(default=0.125, ge=0.01, le=0.5)
    default_retention_s: float = Field(default=86400.0, gt=0)
    retention_s_by_type: dict[str, float] = Field(default_factory=dict)
    # Tombstones outlive records so a late retry of an expired key is answered, not re-run.
    tombstone_retention_s: float = Field(default=7 * 86400.0, ge=0)
    expired_key_policy: ExpiredKeyPolicy = "reject"
    default_recovery_policy: RecoveryPolicy = "interrupt"
    # Absolute-target moves end in the same place when re-run; pick/place do not.
    recovery_policy_by_type: dict[str, RecoveryPolicy] = Field(
        default_factory=lambda: dict(_DEFAULT_RECOVERY_POLICIES)
    )
    max_payload_bytes: int = Field(default=65536, ge=2)
    max_result_bytes: int = Field(default=65536, ge=2)
    # Small: a GC step runs while claims wait (and holds the GIL), so its length bounds the
    # worst claim latency during GC; 64 records take about a millisecond.
    gc_batch_size: int = Field(default=64, ge=1, le=100_000)
    # fsync on every commit; False is only for tests and throwaway simulations.
    durable: bool = True
    # Also fsync LMDB's meta page at each commit. Without it an OS crash/power loss may roll
    # back the last commits (never corrupt them); see docs/store.md for the measurement.
    metasync: bool = True
    group_commit_max_batch: int = Field(default=512, ge=1, le=100_000)

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme != "postgresql" or not parts.netloc:
            raise ValueError(
                "must be a postgresql:// URL (e.g. postgresql://user@host:5432/dbname), "
                f"got scheme {parts.scheme or '(none)'!r}"
            )
        return url

    @field_validator("pg_schema")
    @classmethod
    def _check_pg_schema(cls, schema: str) -> str:
        if _PG_SCHEMA.fullmatch(schema) is None or schema.startswith("pg_"):
            raise ValueError(
                "must be a plain lower-case identifier (a-z, 0-9, _; not starting with a "
                f"digit or pg_; at most 63 characters), got {schema!r}"
            )
        return schema

    @model_validator(mode="after")
    def _check_consistency(self) -> Self:
        if (self.path is None) == (self.url is None):
            raise ValueError(
                "exactly one of path (an LMDB directory) and url (a postgresql:// URL) must be set"
            )
        if self.map_size_initial > self.map_size_max:
            raise ValueError(
                f"map_size_initial ({self.map_size_initial}) must not exceed "
                f"map_size_max ({self.map_size_max})"
            )
        for command_type, seconds in self.retention_s_by_type.items():
            if not (math.isfinite(seconds) and seconds > 0):
                raise ValueError(
                    f"retention_s_by_type[{command_type!r}] must be a positive number of "
                    f"seconds, got {seconds}"
                )
        return self

    @property
    def location(self) -> str:
        """Where the store lives, for messages: the directory, or the URL without password."""
        if self.url is None:
            return str(self.path)
        parts = urlsplit(self.url)
        netloc = parts.netloc
        if parts.password is not None:
            user, _, host = netloc.rpartition("@")
            netloc = f"{user.partition(':')[0]}:***@{host}"
        return f"{urlunsplit(parts._replace(netloc=netloc))} (schema {self.pg_schema})"

    def retention_for(self, command_type: str) -> float:
        return self.retention_s_by_type.get(command_type, self.default_retention_s)

    def recovery_policy_for(self, command_type: str) -> RecoveryPolicy:
        return self.recovery_policy_by_type.get(command_type, self.default_recovery_policy)

    @property
    def claim_limit_bytes(self) -> int:
        """Live data size above which new claims are refused (the rest is headroom)."""
        return int(self.map_size_max * (1.0 - self.headroom_fraction))
