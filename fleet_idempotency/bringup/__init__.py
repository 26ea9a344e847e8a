"""Bring-up: one fleet description drives ``ros2 launch`` and the plain ``fleet-idem`` command.

- ``plan``: fleet description -> the nodes to start (used by the launch files and
  ``fleet-idem``); ``launch_nodes`` turns that plan into ``launch_ros`` actions.
- ``processes``: start, crash, restart and stop a fleet's processes without ``ros2 launch``.
- ``cli``: the ``fleet-idem`` command (demo, up, submit, check).
- ``demo`` and ``report``: the simulated warehouse run with faults, and its invariants.

The fleet description itself is a layer below (``fleet_idempotency.description``): every
part reads it, bring-up only starts what it describes. Only the ROS-free plan is
re-exported here.
"""

from .plan import NodeSpec, agent_node, launch_plan

__all__ = ["NodeSpec", "agent_node", "launch_plan"]
