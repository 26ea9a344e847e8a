"""The package's own backends: robots that act on the world simulator.

``simulated``: the kinematic AMRs, forklifts and arms of ``simulated.py``; ``gazebo``: the
same robots with their bodies in Gazebo (``gazebo_control.py``, wired by
``gazebo_ros.py``). They are plug-ins like anyone's (entry points in setup.py) and the
only code on the robot side that talks to the world simulator: the agent knows nothing
of it.

Each starts at once and connects in the background. The agents of one process share one
connection (``WorldConnection``, through ``BackendContext.shared``); until the world
answers a real round trip, the robot is not ready, and the agent refuses commands before
any side effect. A world that never comes is waited for, not fatal: on a robot, the
agent must keep serving its store whatever else is up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fleet_idempotency.commands import ROBOT_CAPABILITIES
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.backend import (
    BackendContext,
    BackendLogger,
    Command,
    CommandRefused,
    Readiness,
    RobotBackend,
)
from fleet_idempotency.robots.gazebo_control import MotionSettings
from fleet_idempotency.robots.simulated import SimulatedRobot
from fleet_idempotency.sim.profiles import PROFILES
from fleet_idempotency.sim.world_link import WorldLink
from fleet_idempotency.sim.world_link_ros import RosWorldLink, WorldUnavailable

SHARED_NAME = "world_simulator"
WAITING_FOR = "the world simulator (service /world/act)"
# How often "still waiting" is repeated after the first report, and how long one probe
# of the world lasts.
WAIT_REPORT_PERIOD_S = 30.0
PROBE_S = 2.0
NOT_READY = 503


class WorldConnection:
    """One process's link to the world simulator, connected by a thread of its own; the
    robots waiting for it are built on that thread once the world answers."""

    def __init__(self, context: Any, name: str, logger: BackendLogger) -> None:
        self.link = RosWorldLink(context, name)
        self._log = logger
        self._lock = threading.Lock()
        self._connected = False
        self._closed = threading.Event()
        self._waiting: list[Callable[[WorldLink], bool]] = []
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._connect, name="world-connect", daemon=True)
        self._thread.start()

    def when_ready(self, build: Callable[[WorldLink], bool]) -> None:
        """Call ``build(link)`` on the connection's thread once the world answers (at once
        if it already did); a ``build`` that returns False is tried again a moment later."""
        with self._lock:
            self._waiting.append(build)
            connected = self._connected
        if connected:
            self._wake.set()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=PROBE_S + 1.0)
        self.link.close()

    def _connect(self) -> None:
        started = time.monotonic()
        next_report = started
        while not self._closed.is_set():
            try:
                self.link.wait_until_ready(PROBE_S)
                break
            except WorldUnavailable:
                pass
            except Exception as error:  # the link is closed under us at shutdown
                if self._closed.is_set():
                    return
                self._log.error(f"world link: {error!r}")
                self._closed.wait(PROBE_S)
            now = time.monotonic()
            if now >= next_report and not self._closed.is_set():
                waited = f" ({now - started:.0f} s so far)" if now > started + 1 else ""
                self._log.warning(f"waiting for {WAITING_FOR}{waited}; commands refused until then")
                next_report = now + WAIT_REPORT_PERIOD_S
        else:
            return
        if time.monotonic() > started + PROBE_S:
            self._log.info("the world simulator answers")
        with self._lock:
            self._connected = True
        self._build_waiting()

    def _build_waiting(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                waiting, self._waiting = self._waiting, []
            retry = []
            for build in waiting:
                try:
                    done = build(self.link)
                except Exception as error:
                    self._log.error(f"could not bring up a robot on the world: {error!r}")
                    done = False
                if not done:
                    retry.append(build)
            with self._lock:
                self._waiting = retry + self._waiting
            self._wake.wait(1.0 if retry else None)
            self._wake.clear()


class SimulatedParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Multiplies every simulated duration: 1.0 real time, 0.05 twenty times faster, 0
    # instant (benchmarks of the pipeline itself).
    time_scale: float = Field(default=1.0, ge=0, allow_inf_nan=False)


class SimulatedBackend(RobotBackend):
    """A kinematic robot in the world simulator (backend ``simulated``)."""

    interface_version = 1
    Params: ClassVar[type[BaseModel]] = SimulatedParams
    robot_types: ClassVar[frozenset[str] | None] = frozenset(PROFILES)

    def __init__(self, context: BackendContext, params: BaseModel) -> None:
        super().__init__(context, params)
        if context.node is None:
            raise ValueError("the simulated backend reaches the world over ROS: it needs a node")
        self._robot: SimulatedRobot | None = None
        self._connection: WorldConnection | None = None
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def time_scale(self) -> float:
        return float(getattr(self.params, "time_scale", 1.0))

    def start(self) -> None:
        node = self.context.node
        self._connection = self.context.shared.acquire(
            SHARED_NAME,
            lambda: WorldConnection(node.context, self.robot_id, self.context.logger),
            WorldConnection.close,
        )
        self._connection.when_ready(self._build)

    def _build(self, link: WorldLink) -> bool:
        try:
            robot = self._make_robot(link)
        except WorldUnavailable:
            return False
        with self._lock:
            if self._stopped:
                robot.shutdown()
                return True
            self._robot = robot
        self.context.on_ready_change()
        return True

    def _make_robot(self, link: WorldLink) -> SimulatedRobot:
        return SimulatedRobot(
            self.robot_id,
            self.robot_type,
            link,
            self.context.start_pose,
            time_scale=self.time_scale,
        )

    def readiness(self) -> Readiness:
        if self._robot is not None:
            return Readiness(True)
        return Readiness(False, WAITING_FOR)

    def _ready_robot(self) -> SimulatedRobot:
        robot = self._robot
        if robot is None:
            raise CommandRefused(
                f"{self.robot_id} is not ready: waiting for {WAITING_FOR}", NOT_READY
            )
        return robot

    def supported_commands(self) -> frozenset[str]:
        return ROBOT_CAPABILITIES[self.robot_type]

    def prepare(self, command: Command) -> None:
        self._ready_robot().prepare(command)

    def execute(self, command: Command) -> dict[str, Any]:
        return self._ready_robot().execute(command)

    def pose(self) -> Pose:
        robot = self._robot
        return robot.pose() if robot is not None else self.context.start_pose

    def shutdown(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            robot = self._robot
        if robot is not None:
            robot.shutdown()
        if self._connection is not None:
            self.context.shared.release(SHARED_NAME)


class GazeboParams(MotionSettings):
    """How the robot's Gazebo body is driven, and the simulated backend's time scale."""

    time_scale: float = Field(default=1.0, ge=0, allow_inf_nan=False)


class GazeboBackend(SimulatedBackend):
    """The same robot with its body in Gazebo (backend ``gazebo``)."""

    interface_version = 1
    Params: ClassVar[type[BaseModel]] = GazeboParams

    def _make_robot(self, link: WorldLink) -> SimulatedRobot:
        # Imported here: it needs geometry_msgs, nav_msgs and sensor_msgs, which only a
        # Gazebo set-up has to carry.
        from fleet_idempotency.robots.gazebo_ros import gazebo_backend  # noqa: PLC0415

        assert isinstance(self.params, GazeboParams)
        return gazebo_backend(
            self.context.node,
            link,
            robot_id=self.robot_id,
            robot_type=self.robot_type,
            start=self.context.start_pose,
            time_scale=self.time_scale,
            settings=MotionSettings.model_validate(
                self.params.model_dump(include=set(MotionSettings.model_fields))
            ),
        )
