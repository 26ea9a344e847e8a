"""Robot backends: the interface the agent drives, and the simulated robots behind it.

- ``backend``: ``RobotBackend`` (prepare, execute, abort) and its exceptions; a real
  driver implements the same interface.
- ``targets``: target checks and result bodies every backend shares.
- ``simulated``: simulated AMRs, forklifts and arms that act on the simulated world.
- ``gazebo_control`` / ``gazebo_ros``: the same robots with their bodies in Gazebo
  (control logic; ROS wiring), chosen by the agent's ``backend`` parameter (``factory``).
"""

from .backend import Command, CommandRefused, ExecutionAborted, ExecutionFailed, RobotBackend

__all__ = ["Command", "CommandRefused", "ExecutionAborted", "ExecutionFailed", "RobotBackend"]
