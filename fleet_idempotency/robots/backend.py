"""The interface between the agent driver and a robot, simulated or real.

The split between ``prepare`` and ``execute`` is the split the idempotency contract
needs: a refusal from ``prepare`` happens before any side effect, so the agent releases
the key and a retry may run; anything raised once ``execute`` has begun is final.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from fleet_idempotency.commands import Payload
from fleet_idempotency.sim.world import Pose


@dataclass(frozen=True)
class Command:
    """A validated command as a backend sees it."""

    robot_id: str
    key: str
    command_type: str
    payload: Payload
    resumed: bool = False  # re-run after a crash by the 'resume' recovery policy


class CommandRefused(Exception):
    """Refused before any side effect (invalid target, out of reach); the key is released."""

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class ExecutionFailed(Exception):
    """Failed after execution began: final and cached, never re-run under the same key."""

    def __init__(self, message: str, status_code: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class ExecutionAborted(Exception):
    """The agent is shutting down mid-command; the claim stays for crash recovery."""


class RobotBackend(ABC):
    """What the agent driver needs from a robot."""

    robot_id: str
    robot_type: str

    @abstractmethod
    def supported_commands(self) -> frozenset[str]: ...

    @abstractmethod
    def prepare(self, command: Command) -> None:
        """Check the command can be done, without moving anything; raise CommandRefused."""

    @abstractmethod
    def execute(self, command: Command) -> dict[str, Any]:
        """Do it; return the JSON-able result body, or raise ExecutionFailed/Aborted."""

    @abstractmethod
    def pose(self) -> Pose:
        """Current pose, readable from any thread while a command runs."""

    def shutdown(self) -> None:  # noqa: B027 - optional hook; a backend may have nothing to abort
        """Abort a running ``execute`` promptly (it raises ExecutionAborted)."""
