"""The ``ros_action`` backend (and its ``nav2`` preset): robots behind ROS 2 action servers,
one goal per idempotency key.

- ``config.py``: the parameters (per command type: action name and type, goal mapping,
  outcomes), no ROS;
- ``goals.py``: goal UUIDs derived from keys, goals built from commands, outcomes from
  results, no ROS;
- ``backend.py``: the backend (``RosActionBackend``), loading rclpy only when it starts;
- ``ros_link.py``: the action clients, on a side node of the agent process;
- ``nav2.py``: the ``nav2`` preset (NavigateToPose, DockRobot, Nav2's error codes).

Only the ROS-free parts are re-exported here.
"""

from .config import ActionMapping, Outcomes, RosActionParams
from .goals import goal_uuid

__all__ = ["ActionMapping", "Outcomes", "RosActionParams", "goal_uuid"]
