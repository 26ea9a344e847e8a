"""Configuration of one store (one LMDB environment directory)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

MiB = 1024 * 1024

ExpiredKeyPolicy = Literal["reject", "new"]
RecoveryPolicy = Literal["resume", "interrupt"]

_DEFAULT_RECOVERY_POLICIES: dict[str, RecoveryPolicy] = {"move_to_waypoint": "resume"}


class StoreConfig(BaseModel):
    """Validated, immutable store settings; pydantic errors name the offending field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
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

    @model_validator(mode="after")
    def _check_consistency(self) -> Self:
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

    def retention_for(self, command_type: str) -> float:
        return self.retention_s_by_type.get(command_type, self.default_retention_s)

    def recovery_policy_for(self, command_type: str) -> RecoveryPolicy:
        return self.recovery_policy_by_type.get(command_type, self.default_recovery_policy)

    @property
    def claim_limit_bytes(self) -> int:
        """Live data size above which new claims are refused (the rest is headroom)."""
        return int(self.map_size_max * (1.0 - self.headroom_fraction))
