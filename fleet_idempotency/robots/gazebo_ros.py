"""The Gazebo backend's ROS wiring: velocity, odometry, joints and grips as ROS topics.

In a Gazebo fleet these topics are bridged to the robot's Gazebo model by ros_gz_bridge,
with the entries ``bringup/gazebo_plan.py`` generates from the same names
(``sim/gazebo_names.py``). Relative to the robot's namespace (``/fleet/<robot_id>``):

- ``cmd_vel`` (geometry_msgs/Twist, out): linear.x and angular.z of the base;
- ``odom`` (nav_msgs/Odometry, in): the base's pose in the world frame;
- ``joints/<joint>/command`` (std_msgs/Float64, out) and ``joint_states``
  (sensor_msgs/JointState, in): the arm's ``shoulder_yaw`` and ``reach`` joints;
- ``carry/item_<item>/attach`` and ``.../detach`` (std_msgs/Empty, out): one
  DetachableJoint per item the robot can hold.

The endpoints live on the agent's own node, in a callback group of their own, so that
readings keep arriving while the agent's worker thread runs a command. Every control
decision is in ``gazebo_control.py``; this module only converts messages, and a message
it cannot read is counted and dropped (behind the package's callback guard), never
raised into the node.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterable

from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from pydantic import ValidationError
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Empty, Float64

from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.gazebo_control import (
    GazeboLinkError,
    GazeboRobot,
    JointReading,
    MotionSettings,
    PoseReading,
)
from fleet_idempotency.ros.guard import CallbackGuard
from fleet_idempotency.sim.gazebo_names import (
    ARM_JOINTS,
    CMD_VEL,
    JOINT_STATES,
    ODOMETRY,
    CarryAction,
    carry_topic,
    carryable_items,
    joint_command,
)
from fleet_idempotency.sim.world_link import WorldLink

# Grips are rare and must not be lost: reliable, and only sent once the bridge listens.
CARRY_QOS = 10
LISTENER_WAIT_S = 2.0


def pose_from_odometry(message: Odometry) -> Pose:
    """The planar pose in an Odometry message (yaw from the quaternion); may hold NaNs."""
    position = message.pose.pose.position
    q = message.pose.pose.orientation
    yaw = math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
    return Pose(x=float(position.x), y=float(position.y), theta=yaw)


class RosGazeboLink:
    """A GazeboLink over ROS topics on a given node (relative names: its namespace)."""

    def __init__(self, node: Node, items: Iterable[str], joints: Iterable[str] = ()) -> None:
        group = MutuallyExclusiveCallbackGroup()
        self._lock = threading.Lock()
        self._odometry: PoseReading | None = None
        self._joints: dict[str, JointReading] = {}
        self.counters: Counter[str] = Counter()
        guard = CallbackGuard(node.get_logger(), self.counters)
        self._cmd_vel = node.create_publisher(Twist, CMD_VEL, 10)
        node.create_subscription(
            Odometry,
            ODOMETRY,
            guard.topic("odom", self._on_odometry),
            qos_profile_sensor_data,
            callback_group=group,
        )
        self._joint_commands = {
            joint: node.create_publisher(Float64, joint_command(joint), 10) for joint in joints
        }
        if self._joint_commands:
            node.create_subscription(
                JointState,
                JOINT_STATES,
                guard.topic("joint_states", self._on_joint_states),
                qos_profile_sensor_data,
                callback_group=group,
            )
        # Created up front: a publisher made at the moment of a grip would not be matched
        # by the bridge yet.
        self._carry = {
            (item, action): node.create_publisher(Empty, carry_topic(item, action), CARRY_QOS)
            for item in items
            for action in ("attach", "detach")
        }

    # --- readings -------------------------------------------------------------------------
    def _on_odometry(self, message: Odometry) -> None:
        try:
            reading = PoseReading(pose_from_odometry(message), time.monotonic())
        except (ValidationError, TypeError, ValueError, AttributeError):
            self.counters["unreadable_messages"] += 1
            return
        with self._lock:
            self._odometry = reading

    def _on_joint_states(self, message: JointState) -> None:
        received_at = time.monotonic()
        readings: dict[str, JointReading] = {}
        # zip: a message with fewer positions than names is read as far as it goes.
        for name, position in zip(message.name, message.position, strict=False):
            if name in self._joint_commands:
                readings[name] = JointReading(float(position), received_at)
        if not readings:
            self.counters["unreadable_messages"] += 1
        with self._lock:
            self._joints.update(readings)

    def odometry(self) -> PoseReading | None:
        with self._lock:
            return self._odometry

    def joint_position(self, joint: str) -> JointReading | None:
        with self._lock:
            return self._joints.get(joint)

    # --- commands -------------------------------------------------------------------------
    def send_velocity(self, linear_m_s: float, angular_rad_s: float) -> None:
        message = Twist()
        message.linear.x = float(linear_m_s)
        message.angular.z = float(angular_rad_s)
        self._cmd_vel.publish(message)

    def command_joint(self, joint: str, position: float) -> None:
        publisher = self._joint_commands.get(joint)
        if publisher is None:
            raise GazeboLinkError(f"this robot has no joint {joint!r}")
        publisher.publish(Float64(data=float(position)))

    def attach(self, item: str) -> None:
        self._carry_request(item, "attach")

    def detach(self, item: str) -> None:
        self._carry_request(item, "detach")

    def _carry_request(self, item: str, action: CarryAction) -> None:
        publisher = self._carry.get((item, action))
        if publisher is None:
            raise GazeboLinkError(f"no {action} topic for {item!r}: this robot cannot hold it")
        deadline = time.monotonic() + LISTENER_WAIT_S
        while publisher.get_subscription_count() == 0:
            if time.monotonic() > deadline:
                raise GazeboLinkError(
                    f"nothing subscribes to {publisher.topic_name} (is ros_gz_bridge running?)"
                )
            time.sleep(0.02)
        publisher.publish(Empty())


def gazebo_backend(
    node: Node,
    world: WorldLink,
    *,
    robot_id: str,
    robot_type: str,
    start: Pose,
    time_scale: float,
    settings: MotionSettings,
) -> GazeboRobot:
    """The robot of the ``gazebo`` backend (robots/world_backends.py), its topics on
    ``node``."""
    link = RosGazeboLink(
        node,
        carryable_items(world.geometry(), robot_type),
        ARM_JOINTS if robot_type == "arm" else (),
    )
    return GazeboRobot(
        robot_id,
        robot_type,
        world,
        link,
        start,
        settings=settings,
        time_scale=time_scale,
    )
