"""Spin one node on a thread of its own (side nodes: links, clients, rarely used services).

rclpy's Python executors rebuild their wait set from every entity of their nodes on each
wake-up, so entities that are rarely ready, or that must be served while the main
executor is busy, live on side nodes with their own single-threaded executor.
"""

from __future__ import annotations

import threading

from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter

from fleet_idempotency.ros.qos import drop_default_event_handlers

# Every rclpy node serves ~/get_type_description unless told not to: one more service in
# the wait set its executor rebuilds on every wake-up.
NO_TYPE_DESCRIPTION_SERVICE = Parameter("start_type_description_service", value=False)


def side_node(name: str, context: Context) -> Node:
    """A node with only what its owner creates on it: no parameter or type description
    services, no QoS event handlers."""
    node = Node(
        name,
        context=context,
        start_parameter_services=False,
        parameter_overrides=[NO_TYPE_DESCRIPTION_SERVICE],
    )
    drop_default_event_handlers(node)
    return node


def spin_on_thread(node: Node, thread_name: str) -> SingleThreadedExecutor:
    """Start spinning ``node`` on a daemon thread; the caller shuts the executor down."""
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    threading.Thread(target=_spin, args=(executor,), name=thread_name, daemon=True).start()
    return executor


def _spin(executor: SingleThreadedExecutor) -> None:
    try:
        executor.spin()
    except Exception:  # the context was shut down under us: nothing left to serve
        return
