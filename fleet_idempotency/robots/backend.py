"""The interface between the agent driver and a robot: what a robot integrator implements.

The split between ``prepare`` and ``execute`` is the split the idempotency contract
needs: a refusal from ``prepare`` happens before any side effect, so the agent releases
the key and a retry may run; anything raised once ``execute`` has begun is final.

A backend is a plug-in (``robots/registry.py``): a class that names the interface
version it was written for, declares its parameters as a pydantic model, and is built
with a ``BackendContext`` and those validated parameters. It opens whatever it needs
(a link to a simulator, an MQTT client, action clients) in ``start``, without blocking,
and says through ``readiness`` whether it can take a command yet. Until it can, the
agent refuses new commands before any side effect (503, key released).

No ROS imports: a backend that talks ROS gets the agent's node from its context.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from fleet_idempotency.commands import Payload
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.shared import SharedResources

# The version of this interface. A backend declares the one it was written for, as a
# literal (``interface_version = 1``), and the agent refuses a backend built for a
# version it does not implement. Bumped only by a change a backend must adapt to.
INTERFACE_VERSION = 1
SUPPORTED_INTERFACE_VERSIONS = frozenset({1})

__all__ = [
    "INTERFACE_VERSION",
    "SUPPORTED_INTERFACE_VERSIONS",
    "BackendContext",
    "BackendLogger",
    "Command",
    "CommandRefused",
    "ExecutionAborted",
    "ExecutionFailed",
    "NoParams",
    "OutcomeUnknown",
    "Pose",
    "Readiness",
    "RobotBackend",
]


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


class OutcomeUnknown(Exception):
    """After a crash, the robot cannot say what became of a command: it is reported
    INTERRUPTED, for reconciliation, and never run again."""


@dataclass(frozen=True)
class Readiness:
    """Whether the backend can take a command now, and if not, what it waits for (said
    in the robot's status and in the 503 a refused command gets)."""

    ready: bool
    waiting_for: str = ""


READY = Readiness(True)


class BackendLogger(Protocol):
    def info(self, message: str) -> Any: ...
    def warning(self, message: str) -> Any: ...
    def error(self, message: str) -> Any: ...


@dataclass(frozen=True)
class BackendContext:
    """What the agent gives a backend it builds.

    ``start_pose``: where the fleet file says the robot starts (a backend that reads its
    pose from the robot may ignore it). ``node``: the agent's rclpy node, for a backend
    that talks ROS (None where the agent runs without ROS, as in the conformance kit's
    plain-Python checks). ``shared``: resources shared by the agents of one process,
    such as one connection to a simulator for every hosted robot. ``state_dir``: a
    directory of the backend's own beside the robot's store, kept across restarts (for
    what a protocol needs to remember, such as counters that must keep increasing); None
    where the agent has none. The backend creates it when it needs it.
    """

    robot_id: str
    robot_type: str
    logger: BackendLogger
    start_pose: Pose = field(default_factory=Pose)
    node: Any = None
    shared: SharedResources = field(default_factory=SharedResources)
    on_ready_change: Callable[[], None] = field(default=lambda: None)
    state_dir: Path | None = None


class NoParams(BaseModel):
    """The parameters of a backend that takes none."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class RobotBackend(ABC):
    """What the agent driver needs from a robot.

    Subclasses set ``interface_version`` (a literal) and, if they take parameters,
    ``Params`` (a pydantic model; unknown fields should be forbidden so a typo is
    refused). ``robot_types``: the robot types it can drive (None: any).
    """

    interface_version: ClassVar[int]
    Params: ClassVar[type[BaseModel]] = NoParams
    robot_types: ClassVar[frozenset[str] | None] = None
    # True: after an agent crash, a command the dead process had begun is handed to
    # ``reconcile`` (the robot is asked what became of it) instead of the agent's
    # per-command-type recovery policy.
    reconciles_after_crash: ClassVar[bool] = False

    def __init__(self, context: BackendContext, params: BaseModel) -> None:
        self.context = context
        self.params = params
        self.robot_id = context.robot_id
        self.robot_type = context.robot_type

    def start(self) -> None:  # noqa: B027 - optional: a backend may need nothing opened
        """Open what the backend needs (connections, clients) without blocking: waiting
        belongs in the background, reported through ``readiness``."""

    def readiness(self) -> Readiness:
        """Whether a command can be prepared now; called often, must be cheap."""
        return READY

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

    def reconcile(self, command: Command) -> dict[str, Any]:
        """After an agent crash: what became of ``command``, which the dead process had
        claimed and may have started. Ask the robot, never start it again: return its
        result body once it has finished (COMPLETED), raise ExecutionFailed if it failed,
        OutcomeUnknown if the robot does not know it (INTERRUPTED); while the robot still
        runs it, wait as ``execute`` would (ExecutionAborted on shutdown). Called on the
        agent's worker thread once ``readiness`` is ready, only if
        ``reconciles_after_crash``."""
        raise OutcomeUnknown(f"{type(self).__name__} cannot ask the robot")

    def shutdown(self) -> None:  # noqa: B027 - optional hook; a backend may have nothing to abort
        """Abort a running ``execute`` promptly (it raises ExecutionAborted) and close what
        ``start`` opened. Called once, from another thread than ``execute``'s."""
