"""Spin one node on a thread of its own (side nodes: links, clients, rarely used services).

rclpy's Python executors rebuild their wait set from every entity of their nodes on each
wake-up, so entities that are rarely ready, or that must be served while the main
executor is busy, live on side nodes with their own single-threaded executor.
"""

from __future__ import annotations

import threading

from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.experimental import EventsExecutor
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


class EventsSpinner:
    """Spin ``node`` on a daemon thread with rclpy's EventsExecutor (a C++ event queue:
    no wait set rebuilt in Python per message). For nodes of many subscriptions and no
    timers, created before the spinner: in this Jazzy its timers never fire, its
    ``spin()`` holds the GIL for good (so it is driven by ``spin_once`` with a timeout,
    which releases it while waiting), and a thread still inside it when the context goes
    aborts the process, so ``shutdown`` joins the thread first."""

    # How soon ``shutdown`` is noticed: the executor's ``wake()`` does not end its
    # ``spin_once`` in this Jazzy, nor can a guard condition be added to wake it (only
    # the context's shutdown ends it at once). A wake-up costs little; ten a second were
    # measurable on an idle host.
    POLL_S = 1.0

    def __init__(self, node: Node, thread_name: str) -> None:
        self._executor = EventsExecutor(context=node.context)
        self._executor.add_node(node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._executor.spin_once(timeout_sec=self.POLL_S)
        except Exception:  # the context was shut down under us: nothing left to serve
            return

    def shutdown(self, timeout_sec: float = 1.0) -> bool:
        self._stop.set()
        self._thread.join(timeout_sec + self.POLL_S)
        if self._thread.is_alive():
            return False  # still in a callback: shutting the executor under it would abort
        return bool(self._executor.shutdown(timeout_sec=timeout_sec))


def _spin(executor: SingleThreadedExecutor) -> None:
    try:
        executor.spin()
    except Exception:  # the context was shut down under us: nothing left to serve
        return
