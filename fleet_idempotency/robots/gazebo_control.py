"""Robots simulated by Gazebo, behind the RobotBackend interface: the control logic.

A move is a go-to-goal controller over ``cmd_vel`` and odometry that ends on arrival
within tolerance, or fails (final, cached) when the deadline passes. Pick and place
move the item in the kinematic world (which counts the side effect, as for simulated
robots) and then attach or release it in Gazebo; an arm turns and extends its joints to
the station first. Everything Gazebo-facing goes through a ``GazeboLink``: the ROS wiring
(``gazebo_ros.py``) in a fleet, a kinematic integrator in the tests. No ROS imports.

Odometry is untrusted input: a fix with a NaN or infinite field, or one older than
``fix_max_age_s``, counts as no fix. Without a fix the robot is stopped, never steered
blind, and the move fails at its deadline like any other move that does not arrive.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.backend import ExecutionAborted, ExecutionFailed
from fleet_idempotency.robots.simulated import ARRIVAL_TOLERANCE_M, SimulatedRobot
from fleet_idempotency.sim.gazebo_names import ARM_REACH_JOINT, ARM_YAW_JOINT
from fleet_idempotency.sim.world import WorldActionName
from fleet_idempotency.sim.world_link import WorldLink


class MotionSettings(BaseModel):
    """How a Gazebo robot is driven; defaults suit the generated models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    control_rate_hz: float = Field(default=20.0, gt=0, le=1000)
    # At most the tolerance a resumed move counts as "already there", so that a robot that
    # arrived before a crash is never driven (and counted) a second time.
    arrival_tolerance_m: float = Field(default=ARRIVAL_TOLERANCE_M, gt=0, le=ARRIVAL_TOLERANCE_M)
    max_linear_m_s: float | None = Field(default=None, gt=0)  # None: the robot type's speed
    max_angular_rad_s: float = Field(default=1.5, gt=0)
    linear_gain: float = Field(default=1.0, gt=0)
    angular_gain: float = Field(default=2.5, gt=0)
    fix_max_age_s: float = Field(default=0.5, gt=0)
    # A move's deadline: base + per metre of the straight-line distance at its start.
    move_timeout_base_s: float = Field(default=10.0, gt=0)
    move_timeout_per_m_s: float = Field(default=3.0, ge=0)
    joint_tolerance: float = Field(default=0.02, gt=0)  # rad for the yaw, m for the reach
    joint_timeout_s: float = Field(default=15.0, gt=0)


@dataclass(frozen=True)
class PoseReading:
    """Odometry as received, and when (``time.monotonic`` of the receiver)."""

    pose: Pose
    received_at: float


@dataclass(frozen=True)
class JointReading:
    position: float
    received_at: float


class GazeboLinkError(RuntimeError):
    """Gazebo could not be told (nothing listens on the topic: is the bridge running?)."""


class GazeboLink(Protocol):
    """What the backend needs from Gazebo: one robot's actuators and sensors.

    ``attach``/``detach`` raise GazeboLinkError when the request cannot be delivered.
    """

    def send_velocity(self, linear_m_s: float, angular_rad_s: float) -> None: ...

    def odometry(self) -> PoseReading | None:
        """The latest odometry pose in the world frame, as received (may be garbage)."""
        ...

    def command_joint(self, joint: str, position: float) -> None: ...

    def joint_position(self, joint: str) -> JointReading | None: ...

    def attach(self, item: str) -> None: ...

    def detach(self, item: str) -> None: ...


@dataclass(frozen=True)
class Velocity:
    linear_m_s: float = 0.0
    angular_rad_s: float = 0.0


STOP = Velocity()


def usable_pose(pose: Pose) -> bool:
    return all(math.isfinite(value) for value in (pose.x, pose.y, pose.theta))


def wrap_angle(angle: float) -> float:
    """The same angle in [-pi, pi)."""
    return (angle + math.pi) % (2 * math.pi) - math.pi


class GoToGoal:
    """A unicycle go-to-goal controller: turn towards the goal, drive when facing it."""

    def __init__(self, settings: MotionSettings, max_linear_m_s: float) -> None:
        self.settings = settings
        self.max_linear_m_s = max_linear_m_s

    def arrived(self, pose: Pose | None, x: float, y: float) -> bool:
        return (
            pose is not None
            and usable_pose(pose)
            and pose.distance_to(x, y) <= self.settings.arrival_tolerance_m
        )

    def command(self, pose: Pose | None, x: float, y: float) -> Velocity:
        """The velocity to send now; STOP without a usable fix or once arrived."""
        if pose is None or not usable_pose(pose) or self.arrived(pose, x, y):
            return STOP
        distance = pose.distance_to(x, y)
        heading_error = wrap_angle(math.atan2(y - pose.y, x - pose.x) - pose.theta)
        limit = self.settings.max_angular_rad_s
        angular = max(-limit, min(limit, self.settings.angular_gain * heading_error))
        # Slow down while misaligned and turn on the spot when the goal is behind: driving
        # off at an angle would curve away from the goal.
        alignment = max(0.0, math.cos(heading_error))
        linear = min(self.settings.linear_gain * distance, self.max_linear_m_s) * alignment**2
        return Velocity(linear, angular)


class GazeboRobot(SimulatedRobot):
    """A simulated robot whose body is in Gazebo: the same command flow and world
    bookkeeping as ``SimulatedRobot``, with closed-loop motion and real grips."""

    def __init__(
        self,
        robot_id: str,
        robot_type: str,
        world: WorldLink,
        link: GazeboLink,
        start_pose: Pose,
        *,
        settings: MotionSettings | None = None,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(robot_id, robot_type, world, start_pose, time_scale=time_scale)
        self.settings = settings or MotionSettings()
        self._link = link
        self._clock = clock
        self._controller = GoToGoal(
            self.settings, self.settings.max_linear_m_s or self.profile.speed_m_s or 1.0
        )

    def pose(self) -> Pose:
        """The latest usable odometry (the last known pose without one; an arm's base)."""
        if self.profile.speed_m_s > 0:
            self._fresh_fix()
        return super().pose()

    # --- hooks of SimulatedRobot ----------------------------------------------------------
    def _travel_to(self, x: float, y: float) -> None:
        start = self.pose()
        timeout_s = (
            self.settings.move_timeout_base_s
            + self.settings.move_timeout_per_m_s * start.distance_to(x, y)
        )
        deadline = self._clock() + timeout_s
        try:
            while True:
                fix = self._fresh_fix()
                if self._controller.arrived(fix, x, y):
                    return
                velocity = self._controller.command(fix, x, y)
                self._link.send_velocity(velocity.linear_m_s, velocity.angular_rad_s)
                if self._clock() >= deadline:
                    where = (
                        "no usable odometry"
                        if fix is None
                        else f"still {fix.distance_to(x, y):.2f} m away"
                    )
                    raise ExecutionFailed(
                        f"{self.robot_id} did not reach ({x:g}, {y:g}) within "
                        f"{timeout_s:.1f} s ({where})"
                    )
                self._tick()
        finally:
            self._halt()

    def _reach_to(self, x: float, y: float) -> None:
        """Turn and extend the arm's joints to the point; fail if they do not get there."""
        base = super().pose()
        goals = {
            ARM_YAW_JOINT: wrap_angle(math.atan2(y - base.y, x - base.x) - base.theta),
            ARM_REACH_JOINT: base.distance_to(x, y),
        }
        deadline = self._clock() + self.settings.joint_timeout_s
        while True:
            for joint, goal in goals.items():
                self._link.command_joint(joint, goal)  # re-sent each tick: a lost one is harmless
            errors = {joint: self._joint_error(joint, goal) for joint, goal in goals.items()}
            if all(error <= self.settings.joint_tolerance for error in errors.values()):
                return
            if self._clock() >= deadline:
                report = ", ".join(
                    f"{joint} {'has no reading' if math.isinf(error) else f'off by {error:.3f}'}"
                    for joint, error in errors.items()
                )
                raise ExecutionFailed(
                    f"{self.robot_id} did not reach ({x:g}, {y:g}) within "
                    f"{self.settings.joint_timeout_s:.1f} s ({report})"
                )
            self._tick()

    def _hold(self, action: WorldActionName, item: str) -> None:
        try:
            if action == "pick":
                self._link.attach(item)
            elif action == "place":
                self._link.detach(item)
        except GazeboLinkError as error:
            # The world already moved the item: final, and the status check tells the tale.
            raise ExecutionFailed(f"{action} of {item!r} not done in Gazebo: {error}") from None

    # --- helpers --------------------------------------------------------------------------
    def _fresh_fix(self) -> Pose | None:
        """The latest odometry if it is usable and recent; it also becomes ``pose()``."""
        reading = self._link.odometry()
        if reading is None or not usable_pose(reading.pose):
            return None
        if not self._clock() - reading.received_at <= self.settings.fix_max_age_s:
            return None  # also false for a NaN stamp
        self._set_pose(reading.pose)
        return reading.pose

    def _joint_error(self, joint: str, goal: float) -> float:
        """How far a joint is from its goal; infinite without a usable, recent reading."""
        reading = self._link.joint_position(joint)
        if reading is None or not math.isfinite(reading.position):
            return math.inf
        if not self._clock() - reading.received_at <= self.settings.fix_max_age_s:
            return math.inf
        error = reading.position - goal
        return abs(wrap_angle(error) if joint == ARM_YAW_JOINT else error)

    def _tick(self) -> None:
        if self._stop.wait(1.0 / self.settings.control_rate_hz):
            raise ExecutionAborted(f"{self.robot_id} is shutting down")

    def _halt(self) -> None:
        # Never leave a robot driving on its last command; a link already closed by the
        # shutdown cannot send, and that must not hide why the move ended.
        with suppress(Exception):
            self._link.send_velocity(0.0, 0.0)
