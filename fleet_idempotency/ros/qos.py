"""Quality-of-service profiles shared by every endpoint of the package.

Services default to KEEP_LAST 10: with more than ten requests outstanding on one client
(a burst of submits, a robot streaming pose updates to the world) DDS overwrites the
oldest in the writer's history and that request is silently lost. A deep reliable
history keeps every request and reply of a burst.
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

SERVICE_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1000,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
# Commands and results: every message matters and bursts happen (a retry wave after a
# robot returns), so the same depth.
RELIABLE_TOPIC_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
