"""Sample backend classes for the registry's tests: one good, and one per way to be wrong."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fleet_idempotency.robots.backend import Command, Pose, RobotBackend


class SampleParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    speed_m_s: float = Field(default=1.0, gt=0)
    stations: list[str] = Field(default_factory=list)
    serial: str


class Sample(RobotBackend):
    interface_version = 1
    Params: ClassVar[type[BaseModel]] = SampleParams
    robot_types: ClassVar[frozenset[str] | None] = frozenset({"conveyor"})

    def supported_commands(self) -> frozenset[str]:
        return frozenset({"pick", "place"})

    def prepare(self, command: Command) -> None:
        pass

    def execute(self, command: Command) -> dict[str, Any]:
        return {}

    def pose(self) -> Pose:
        return Pose()


class FromTheFuture(Sample):
    interface_version = 99


class Unversioned(RobotBackend):
    def supported_commands(self) -> frozenset[str]:
        return frozenset()

    def prepare(self, command: Command) -> None:
        pass

    def execute(self, command: Command) -> dict[str, Any]:
        return {}

    def pose(self) -> Pose:
        return Pose()


class NotABackend:
    interface_version = 1


class RefusesToStart(Sample):
    def __init__(self, *args: Any) -> None:
        raise ValueError("serial number unknown to the controller")
