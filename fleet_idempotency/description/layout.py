"""The warehouse's layout as the fleet file describes it: waypoints, docks, slots.

A description only, with no behaviour: the world simulator gives it physics, the
robot backends resolve command targets against it, the HTTP page draws it.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fleet_idempotency.commands import NAME_PATTERN
from fleet_idempotency.geometry import Point

SlotKind = Literal["pallet", "station"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Slot(_Model):
    """A pallet slot (forklifts) or a station (arms); ``item`` is what lies there at start."""

    x: float
    y: float
    kind: SlotKind = "pallet"
    item: str | None = Field(default=None, pattern=NAME_PATTERN)


class WorldConfig(_Model):
    waypoints: dict[str, Point] = Field(default_factory=dict)
    docks: dict[str, Point] = Field(default_factory=dict)
    slots: dict[str, Slot] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique_items(self) -> WorldConfig:
        items = [slot.item for slot in self.slots.values() if slot.item is not None]
        duplicated = sorted(item for item, count in Counter(items).items() if count > 1)
        if duplicated:
            raise ValueError(f"items placed in more than one slot: {duplicated}")
        return self
