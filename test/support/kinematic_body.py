"""A robot body integrated in real time: it stands in for Gazebo's physics in the tests.

Gazebo cannot be installed on these machines, so the Gazebo backend's tests drive this
instead: a unicycle that follows the last velocity command (as Gazebo's VelocityControl
system does), reports its pose in the world frame (as the OdometryPublisher system does),
moves joints towards their commanded positions at a bounded speed (as a position
controller would), and records attach/detach requests (the DetachableJoint topics).
"""

from __future__ import annotations

import math
import threading
import time

from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.gazebo_control import JointReading, MotionSettings, PoseReading

JOINT_SPEED = 2.0  # rad/s or m/s
# Faster than the real robots, so that each real-time move in a test takes about a second.
FAST_MOTION = MotionSettings(
    max_linear_m_s=4.0, max_angular_rad_s=4.0, angular_gain=5.0, linear_gain=4.0
)


class KinematicBody:
    def __init__(self, start: Pose, joints: dict[str, float] | None = None) -> None:
        self._lock = threading.Lock()
        self._pose = start
        self._velocity = (0.0, 0.0)
        self._joints = dict(joints or {})
        self._joint_goals = dict(self._joints)
        self._last = time.monotonic()
        self.velocity_commands = 0
        self.carry_requests: list[tuple[str, str]] = []

    # --- physics --------------------------------------------------------------------------
    def step(self) -> None:
        """Integrate up to now; called before every read and every new command."""
        with self._lock:
            now = time.monotonic()
            dt, self._last = now - self._last, now
            linear, angular = self._velocity
            theta = self._pose.theta + angular * dt / 2  # midpoint heading: exact for arcs
            self._pose = Pose(
                x=self._pose.x + linear * math.cos(theta) * dt,
                y=self._pose.y + linear * math.sin(theta) * dt,
                theta=math.remainder(self._pose.theta + angular * dt, 2 * math.pi),
            )
            for joint, position in self._joints.items():
                goal = self._joint_goals.get(joint, position)
                change = max(-JOINT_SPEED * dt, min(JOINT_SPEED * dt, goal - position))
                self._joints[joint] = position + change

    @property
    def velocity(self) -> tuple[float, float]:
        with self._lock:
            return self._velocity

    @property
    def true_pose(self) -> Pose:
        self.step()
        with self._lock:
            return self._pose

    # --- the GazeboLink a backend sees ----------------------------------------------------
    def send_velocity(self, linear_m_s: float, angular_rad_s: float) -> None:
        self.step()
        with self._lock:
            self._velocity = (linear_m_s, angular_rad_s)
            self.velocity_commands += 1

    def odometry(self) -> PoseReading | None:
        return PoseReading(self.true_pose, time.monotonic())

    def command_joint(self, joint: str, position: float) -> None:
        self.step()
        with self._lock:
            self._joint_goals[joint] = position

    def joint_position(self, joint: str) -> JointReading | None:
        self.step()
        with self._lock:
            if joint not in self._joints:
                return None
            return JointReading(self._joints[joint], time.monotonic())

    def attach(self, item: str) -> None:
        self.carry_requests.append(("attach", item))

    def detach(self, item: str) -> None:
        self.carry_requests.append(("detach", item))


class BlindBody(KinematicBody):
    """A body whose odometry is garbage (NaN, as a broken sensor or bridge sends)."""

    def odometry(self) -> PoseReading | None:
        self.step()
        return PoseReading(Pose(x=math.nan, y=0.0, theta=math.inf), time.monotonic())


class FrozenOdometryBody(KinematicBody):
    """A body whose odometry stopped arriving: the last reading only gets older."""

    def __init__(self, start: Pose) -> None:
        super().__init__(start)
        self._frozen = PoseReading(start, time.monotonic())

    def odometry(self) -> PoseReading | None:
        return self._frozen
