"""Robot backends: the interface the agent drives, and the simulated robots behind it.

- ``backend``: ``RobotBackend`` (prepare, execute, abort) and its exceptions; a real
  driver implements the same interface.
- ``simulated``: simulated AMRs, forklifts and arms that act on the simulated world.
"""

from .backend import Command, CommandRefused, ExecutionAborted, ExecutionFailed, RobotBackend

__all__ = ["Command", "CommandRefused", "ExecutionAborted", "ExecutionFailed", "RobotBackend"]
