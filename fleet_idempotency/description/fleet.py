"""The fleet description (YAML), validated once, shared by every way of starting a fleet.

Below every part that reads it (orchestrator, agents, world, HTTP API, bring-up): it
describes, it does not start anything.

Errors name the bad field (``robots.2.type: Input should be 'amr', 'forklift' or 'arm'``)
so that a typo in a fleet file is found before any node starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fleet_idempotency.commands import NAME_PATTERN, ROBOT_CAPABILITIES, CommandType
from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.geometry import Pose


class FleetConfigError(ValueError):
    """A fleet file that cannot be used; the message names the file and the field."""


BackendParamValue = str | int | float | bool | list[Any] | dict[str, Any] | None


class RobotSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=NAME_PATTERN)
    # amr, forklift or arm (the simulated kinds), or any other kind a backend drives
    # (then ``commands`` says what it can do).
    type: str = Field(pattern=NAME_PATTERN)
    start: Pose = Field(default_factory=Pose)
    capacity: int = Field(default=4, ge=1, le=10_000)
    # The robot backend the robot's agent drives (robots/registry.py): an entry point of
    # group fleet_idempotency.robot_backends, or module:Class; and its parameters,
    # validated by the backend itself when the agent starts.
    backend: str = Field(default="simulated", min_length=1, max_length=256)
    backend_params: dict[str, BackendParamValue] = Field(default_factory=dict)
    # The command types this robot accepts (default: those of its type's simulated kind).
    commands: frozenset[CommandType] | None = None

    @model_validator(mode="after")
    def _known_capabilities(self) -> RobotSpec:
        if self.commands is None and self.type not in ROBOT_CAPABILITIES:
            raise ValueError(
                f"robot type {self.type!r} is not one of {', '.join(ROBOT_CAPABILITIES)}: "
                "list the command types it accepts in 'commands'"
            )
        if self.commands is not None and not self.commands:
            raise ValueError("'commands' must name at least one command type")
        return self

    def capabilities(self) -> frozenset[str]:
        """The command types this robot accepts."""
        if self.commands is not None:
            return frozenset(self.commands)
        return ROBOT_CAPABILITIES[self.type]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SimulationSettings(_Section):
    # Multiplies every simulated duration: 1.0 is real time, 0.05 twenty times faster,
    # 0 instant (benchmarks of the pipeline itself).
    time_scale: float = Field(default=0.05, ge=0)


RecoveryPolicy = Literal["resume", "interrupt"]


def _default_recovery_policies() -> dict[CommandType, RecoveryPolicy]:
    return {"move_to_waypoint": "resume"}


class RetentionSettings(_Section):
    """Key retention on the robots (the orchestrator's must cover the client retry window)."""

    retention_s: float = Field(default=86_400.0, gt=0)
    retention_s_by_type: dict[CommandType, float] = Field(default_factory=dict)
    tombstone_retention_s: float = Field(default=7 * 86_400.0, ge=0)
    expired_key_policy: Literal["reject", "new"] = "reject"
    # Absolute-target moves end in the same place when re-run; pick and place do not.
    recovery_policy_by_type: dict[CommandType, RecoveryPolicy] = Field(
        default_factory=_default_recovery_policies
    )


class OrchestratorSection(_Section):
    queue_capacity_per_robot: int = Field(default=256, ge=1)
    retry_initial_s: float = Field(default=0.5, gt=0)
    retry_min_s: float = Field(default=0.1, gt=0)
    retry_max_s: float = Field(default=5.0, gt=0)
    acknowledged_resend_s: float = Field(default=30.0, gt=0)
    unanswered_per_robot: int = Field(default=2, ge=1)
    offline_after_s: float = Field(default=30.0, gt=0)
    retention_s: float = Field(default=86_400.0, gt=0)


class HttpSection(_Section):
    """Where the HTTP API (``http_api``) listens; without API keys it binds to localhost."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65_535)


class FaultSettings(_Section):
    """Faults injected on purpose by simulations and tests (all off by default)."""

    result_drop_probability: float = Field(default=0.0, ge=0, le=0.9)
    duplicate_delivery_probability: float = Field(default=0.0, ge=0, le=1)
    reorder_delivery_probability: float = Field(default=0.0, ge=0, le=1)
    seed: int = 0


class FleetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    world: WorldConfig = Field(default_factory=WorldConfig)
    robots: list[RobotSpec] = Field(default_factory=list)
    simulation: SimulationSettings = Field(default_factory=SimulationSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    orchestrator: OrchestratorSection = Field(default_factory=OrchestratorSection)
    faults: FaultSettings = Field(default_factory=FaultSettings)
    http: HttpSection = Field(default_factory=HttpSection)

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


def validation_problems(error: ValidationError, prefix: str = "") -> str:
    """Every problem of a validation error, each naming its field (``prefix`` + path)."""
    return "; ".join(
        f"{prefix}{'.'.join(str(part) for part in item['loc']) or '(top level)'}: {item['msg']}"
        for item in error.errors()
    )


def parse_fleet(data: Any, source: str = "<fleet>") -> FleetConfig:
    try:
        return FleetConfig.model_validate(data)
    except ValidationError as error:
        raise FleetConfigError(f"{source}: {validation_problems(error)}") from None


def load_fleet(path: Path | str) -> FleetConfig:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise FleetConfigError(f"{path}: cannot read fleet file ({error.strerror})") from None
    except yaml.YAMLError as error:
        raise FleetConfigError(f"{path}: not valid YAML ({error})") from None
    return parse_fleet(data or {}, str(path))
