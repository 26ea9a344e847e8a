"""``launch_ros`` Node actions for a launch plan; used by the launch files only.

Needs a full ROS 2 install (launch_ros is not on PyPI); the plan itself comes from
``bringup.launch_plan`` and is tested without it.

Every node respawns, as ``fleet-idem``'s supervisor restarts it, except one that exited
with the start-up error code (``protocol.EXIT_STARTUP_ERROR``): a bad parameter or an
unreadable store fails the same way on every start, and launch's ``respawn`` knows no
exit codes. Its ProcessExited event comes before launch decides to respawn (and the
respawn waits ``respawn_delay``), so shutting the action down then cancels the respawn.
"""

from __future__ import annotations

from typing import Any

from launch.actions import EmitEvent, LogInfo, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import matches_action
from launch.events.process import ShutdownProcess
from launch_ros.actions import Node

from fleet_idempotency.bringup.plan import NodeSpec, launch_node_arguments
from fleet_idempotency.protocol import EXIT_STARTUP_ERROR


def launch_nodes(plan: list[NodeSpec]) -> list[Any]:
    actions: list[Any] = []
    for spec in plan:
        node = Node(**launch_node_arguments(spec))
        actions += [node, _no_respawn_after_startup_error(node, spec)]
    return actions


def _no_respawn_after_startup_error(node: Node, spec: NodeSpec) -> RegisterEventHandler:
    def on_exit(event: Any, _context: Any) -> list[Any] | None:
        if event.returncode != EXIT_STARTUP_ERROR:
            return None
        return [
            EmitEvent(event=ShutdownProcess(process_matcher=matches_action(node))),
            LogInfo(
                msg=f"{spec.executable} {spec.namespace or ''}: cannot start (exit code "
                f"{EXIT_STARTUP_ERROR}, its message is above); not respawned"
            ),
        ]

    return RegisterEventHandler(OnProcessExit(target_action=node, on_exit=on_exit))
