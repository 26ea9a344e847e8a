"""The fleet description (YAML), validated once, shared by every way of starting a fleet.

Errors name the bad field (``robots.2.type: Input should be 'amr', 'forklift' or 'arm'``)
so that a typo in a fleet file is found before any node starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fleet_idempotency.commands import NAME_PATTERN, RobotType
from fleet_idempotency.sim.world import Pose, WorldConfig


class FleetConfigError(ValueError):
    """A fleet file that cannot be used; the message names the file and the field."""


class RobotSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=NAME_PATTERN)
    type: RobotType
    start: Pose = Field(default_factory=Pose)
    capacity: int = Field(default=4, ge=1, le=10_000)


class FleetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    world: WorldConfig = Field(default_factory=WorldConfig)
    robots: list[RobotSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_robot_ids(self) -> FleetConfig:
        ids = [robot.id for robot in self.robots]
        duplicated = sorted({robot_id for robot_id in ids if ids.count(robot_id) > 1})
        if duplicated:
            raise ValueError(f"robot ids must be unique, repeated: {duplicated}")
        return self

    def robot(self, robot_id: str) -> RobotSpec:
        for spec in self.robots:
            if spec.id == robot_id:
                return spec
        raise KeyError(robot_id)


def parse_fleet(data: Any, source: str = "<fleet>") -> FleetConfig:
    try:
        return FleetConfig.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or '(top level)'}: {item['msg']}"
            for item in error.errors()
        )
        raise FleetConfigError(f"{source}: {problems}") from None


def load_fleet(path: Path | str) -> FleetConfig:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise FleetConfigError(f"{path}: cannot read fleet file ({error.strerror})") from None
    except yaml.YAMLError as error:
        raise FleetConfigError(f"{path}: not valid YAML ({error})") from None
    return parse_fleet(data or {}, str(path))
