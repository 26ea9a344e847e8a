"""Configuration of one event log (one LMDB environment directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

MiB = 1024 * 1024


class EventLogConfig(BaseModel):
    """Validated, immutable event-log settings; pydantic errors name the offending field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    map_size_initial: int = Field(default=8 * MiB, ge=64 * 1024)
    # The log is append-only and never compacted, so the ceiling is far above the store's:
    # the map is reserved address space, the file grows only with what is written.
    map_size_max: int = Field(default=16 * 1024 * MiB, ge=64 * 1024)
    # fsync on every commit (data and meta page): an event is on disk when append returns.
    # False is only for tests and throwaway simulations.
    durable: bool = True

    @model_validator(mode="after")
    def _check_sizes(self) -> Self:
        if self.map_size_initial > self.map_size_max:
            raise ValueError(
                f"map_size_initial ({self.map_size_initial}) must not exceed "
                f"map_size_max ({self.map_size_max})"
            )
        return self
