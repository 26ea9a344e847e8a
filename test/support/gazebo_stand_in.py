"""A ROS node that stands in for Gazebo and its ros_gz bridge in the tests.

Gazebo cannot be installed here. This node answers on the very ROS topics the bridge
would serve for one robot (names from fleet_idempotency.sim.gazebo_names): it follows
``cmd_vel`` with a kinematic body (support/kinematic_body.py), publishes nav_msgs/Odometry
and sensor_msgs/JointState from it at 50 Hz, takes joint commands, and records the
attach/detach requests that Gazebo's DetachableJoint systems would act on.
"""

from __future__ import annotations

import math
from typing import Any

from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Empty, Float64

from fleet_idempotency.sim.gazebo_names import (
    CMD_VEL,
    JOINT_STATES,
    ODOMETRY,
    carry_topic,
    joint_command,
    ros_topic,
)

from support.kinematic_body import KinematicBody

PUBLISH_PERIOD_S = 0.02


class GazeboStandIn(Node):
    def __init__(
        self,
        context: Any,
        robot_id: str,
        body: KinematicBody,
        *,
        items: list[str] | None = None,
        joints: list[str] | None = None,
        garbage_odometry: bool = False,
    ) -> None:
        super().__init__(f"gazebo_stand_in_{robot_id}", context=context)
        self.body = body
        self.robot_id = robot_id
        self.joints = joints or []
        self.garbage_odometry = garbage_odometry
        self.twists_received = 0
        self.create_subscription(Twist, ros_topic(robot_id, CMD_VEL), self._on_twist, 10)
        self._odometry = self.create_publisher(Odometry, ros_topic(robot_id, ODOMETRY), 10)
        self._joint_states = self.create_publisher(
            JointState, ros_topic(robot_id, JOINT_STATES), 10
        )
        for joint in self.joints:
            self.create_subscription(
                Float64,
                ros_topic(robot_id, joint_command(joint)),
                lambda message, j=joint: body.command_joint(j, message.data),
                10,
            )
        for item in items or []:
            self.create_subscription(
                Empty,
                ros_topic(robot_id, carry_topic(item, "attach")),
                lambda _message, i=item: body.attach(i),
                10,
            )
            self.create_subscription(
                Empty,
                ros_topic(robot_id, carry_topic(item, "detach")),
                lambda _message, i=item: body.detach(i),
                10,
            )
        self.create_timer(PUBLISH_PERIOD_S, self._publish)

    def _on_twist(self, message: Twist) -> None:
        self.twists_received += 1
        self.body.send_velocity(message.linear.x, message.angular.z)

    def _publish(self) -> None:
        pose = self.body.true_pose
        odometry = Odometry()
        odometry.header.frame_id = f"{self.robot_id}/odom"
        odometry.header.stamp = self.get_clock().now().to_msg()
        if self.garbage_odometry:  # what a broken sensor or a bad bridge entry sends
            odometry.pose.pose.position.x = math.nan
            odometry.pose.pose.orientation.w = math.inf
        else:
            odometry.pose.pose.position.x = pose.x
            odometry.pose.pose.position.y = pose.y
            odometry.pose.pose.orientation.z = math.sin(pose.theta / 2)
            odometry.pose.pose.orientation.w = math.cos(pose.theta / 2)
        self._odometry.publish(odometry)
        if self.joints:
            readings = [self.body.joint_position(joint) for joint in self.joints]
            self._joint_states.publish(
                JointState(
                    name=list(self.joints),
                    position=[reading.position if reading else 0.0 for reading in readings],
                )
            )
