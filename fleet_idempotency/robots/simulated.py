"""Simulated AMRs, forklifts and arms behind the RobotBackend interface.

Commands take simulated time proportional to distance (or a fixed handling time) scaled
by ``time_scale``, so that retries really arrive while a command is executing. Every
physical effect goes through the WorldLink, where it is counted.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from fleet_idempotency.commands import (
    ROBOT_CAPABILITIES,
    Dock,
    MoveToWaypoint,
    Pick,
)
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.backend import (
    Command,
    ExecutionAborted,
    ExecutionFailed,
    RobotBackend,
)
from fleet_idempotency.robots.targets import refuse_unsupported, resolve_target, result_body
from fleet_idempotency.sim.profiles import PROFILES
from fleet_idempotency.sim.world import WorldActionFailed, WorldActionName
from fleet_idempotency.sim.world_link import WorldLink

# Close enough to count as "already there" when a resumed move re-runs.
ARRIVAL_TOLERANCE_M = 0.05
# Pose updates sent to the world while travelling, in simulated seconds, and at most one
# per MIN_TRAVEL_STEP_WALL_S of wall time: at the chaos bench's time scale (0.002) a step
# of 0.5 simulated seconds is 1 ms, a world call per millisecond per moving robot whose
# replies every agent process reads, for a pose nobody looks at that often.
TRAVEL_STEP_S = 0.5
MIN_TRAVEL_STEP_WALL_S = 0.025


class SimulatedRobot(RobotBackend):
    def __init__(
        self,
        robot_id: str,
        robot_type: str,
        world: WorldLink,
        start_pose: Pose,
        time_scale: float = 1.0,
    ) -> None:
        if robot_type not in PROFILES:
            raise ValueError(
                f"no simulated robot of type {robot_type!r} (have: {sorted(PROFILES)})"
            )
        if time_scale < 0 or not math.isfinite(time_scale):
            raise ValueError("time_scale must be a finite number >= 0 (0: instant)")
        self.robot_id = robot_id
        self.robot_type = robot_type
        self.profile = PROFILES[robot_type]
        self.time_scale = time_scale
        self._world = world
        self._stop = threading.Event()
        self._pose_lock = threading.Lock()
        known = world.locate(robot_id)
        self._pose = known if known is not None else start_pose
        if known is None:
            world.set_pose(robot_id, start_pose)

    # --- RobotBackend ---------------------------------------------------------------------
    def supported_commands(self) -> frozenset[str]:
        return ROBOT_CAPABILITIES[self.robot_type]

    def pose(self) -> Pose:
        with self._pose_lock:
            return self._pose

    def shutdown(self) -> None:
        self._stop.set()

    def prepare(self, command: Command) -> None:
        refuse_unsupported(self.robot_type, command.command_type)
        self._target_of(command)

    def execute(self, command: Command) -> dict[str, Any]:
        payload = command.payload
        target_name, (x, y) = self._target_of(command)
        if isinstance(payload, MoveToWaypoint):
            if command.resumed and self.pose().distance_to(x, y) <= ARRIVAL_TOLERANCE_M:
                # An absolute move that already arrived before the crash: nothing to redo.
                return self._result(command, target_name, already_there=True)
            self._travel_to(x, y)
            self._act(command, "arrive", target_name)
            return self._result(command, target_name)
        if isinstance(payload, Dock):
            self._travel_to(x, y)
            self._act(command, "dock", target_name)
            self._wait(self.profile.docking_s)
            return self._result(command, target_name)
        action: WorldActionName = "pick" if isinstance(payload, Pick) else "place"
        if self.profile.speed_m_s > 0:
            self._travel_to(x, y)
        else:
            self._reach_to(x, y)
        self._wait(self.profile.handling_s / 2)  # approach: forks down, or arm reaching
        item = self._act(command, action, target_name)
        self._hold(action, item)
        self._wait(self.profile.handling_s / 2)  # lift and retract, carrying the item
        return self._result(command, target_name, item=item)

    # --- helpers --------------------------------------------------------------------------
    def _target_of(self, command: Command) -> tuple[str, tuple[float, float]]:
        """Resolve and check the command's target; raise CommandRefused if it is not valid."""
        target = resolve_target(
            self._world.geometry(),
            command.payload,
            robot_type=self.robot_type,
            reach_m=self.profile.reach_m,
            mobile=self.profile.speed_m_s > 0,
            pose=self.pose(),
        )
        return target.name, (target.x, target.y)

    def _act(self, command: Command, action: WorldActionName, target: str) -> str:
        try:
            return self._world.act(self.robot_id, command.key, action, target, self.pose())
        except WorldActionFailed as failure:
            raise ExecutionFailed(f"{action} at {target} failed: {failure}") from None

    def _wait(self, simulated_s: float) -> None:
        if (
            simulated_s > 0
            and self.time_scale > 0
            and self._stop.wait(simulated_s * self.time_scale)
        ):
            raise ExecutionAborted(f"{self.robot_id} is shutting down")

    def _travel_to(self, x: float, y: float) -> None:
        start = self.pose()
        distance = start.distance_to(x, y)
        if distance == 0:
            return
        theta = math.atan2(y - start.y, x - start.x)
        travel_s = distance / self.profile.speed_m_s
        steps = 1
        if self.time_scale > 0:
            step_s = max(TRAVEL_STEP_S, MIN_TRAVEL_STEP_WALL_S / self.time_scale)
            steps = max(1, math.ceil(travel_s / step_s))
        for step in range(1, steps + 1):
            self._wait(travel_s / steps)
            fraction = step / steps
            self._move_to(
                Pose(
                    x=start.x + (x - start.x) * fraction,
                    y=start.y + (y - start.y) * fraction,
                    theta=theta,
                )
            )

    # Hooks for a backend whose robots have bodies (gazebo_control.GazeboRobot): in the
    # kinematic world an arm reaches instantly and the world alone says what is carried.
    def _reach_to(self, x: float, y: float) -> None:
        """A fixed robot turns its tool to a point within reach."""

    def _hold(self, action: WorldActionName, item: str) -> None:
        """Grip (after a pick) or release (after a place) the item the world just moved."""

    def _move_to(self, pose: Pose) -> None:
        self._set_pose(pose)
        self._world.set_pose(self.robot_id, pose)

    def _set_pose(self, pose: Pose) -> None:
        with self._pose_lock:
            self._pose = pose

    def _result(self, command: Command, target: str, **extra: Any) -> dict[str, Any]:
        return result_body(self.robot_id, command, target, self.pose(), **extra)
