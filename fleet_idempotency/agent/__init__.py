"""The agent driver: one per robot, onboard; executes each idempotency key at most once.

- ``core``: the robot-side logic without ROS (validate, claim, queue, execute, finish).
- ``dedup_window``: the in-memory window that drops exact transport repeats cheaply.
- ``node``: ``AgentDriver``, the ROS node around the core (``agent_driver`` executable).
- ``host``: several agent nodes in one process, for large simulated fleets
  (``agent_host`` executable).

Only the ROS-free pieces are re-exported here, so importing the logic never loads rclpy.
"""

from .core import AgentCore, AnswerSink, Load
from .dedup_window import RecentDeliveries

__all__ = ["AgentCore", "AnswerSink", "Load", "RecentDeliveries"]
