"""The orchestrator: the fleet's Unified Control API, its queue, dispatch and reconciliation.

- ``core``: the logic without ROS (submit admission, results, status checks, restore).
- ``node``: ``Orchestrator``, the ROS node around the core (``orchestrator`` executable).

Only the ROS-free pieces are re-exported here, so importing the logic never loads rclpy.
"""

from .core import OrchestratorCore, OrchestratorSettings, SubmitAnswer, SubmitRequest, robot_key

__all__ = [
    "OrchestratorCore",
    "OrchestratorSettings",
    "SubmitAnswer",
    "SubmitRequest",
    "robot_key",
]
