"""Spin one node on a thread of its own (side nodes: links, clients, rarely used services).

rclpy's Python executors rebuild their wait set from every entity of their nodes on each
wake-up, so entities that are rarely ready, or that must be served while the main
executor is busy, live on side nodes with their own single-threaded executor, or with
rclpy's EventsExecutor (``serve_events``, ``EventsSpinner``). Every such thread serves
through ``keep_serving``, which outlives an error out of a callback.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable

from rclpy.context import Context
from rclpy.executors import Executor, SingleThreadedExecutor
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
    start_serving_thread(executor, thread_name)
    return executor


# Every serving thread this process started, for ``join_serving_threads``.
_SERVING: list[threading.Thread] = []


def start_serving_thread(executor: Executor, thread_name: str) -> threading.Thread:
    """Spin ``executor`` on a new daemon thread through ``keep_serving``; the caller
    shuts the executor down and may join the thread returned."""
    thread = threading.Thread(
        target=keep_serving,
        args=(executor.spin, executor.context.ok),
        name=thread_name,
        daemon=True,
    )
    _SERVING[:] = [*(t for t in _SERVING if t.is_alive()), thread]
    thread.start()
    return thread


def join_serving_threads(timeout_s: float) -> list[str]:
    """After the context's shutdown (which wakes every executor): wait until every
    serving thread has left rclpy; return the names of those still in it.

    A daemon thread still inside an rclpy wait when the interpreter finalises is ended
    by pthread_exit as it takes the GIL back, which unwinds through pybind11's noexcept
    frames: std::terminate, "Fatal Python error: Aborted" (seen in about 1 of 30 stops
    of an agent host, its services executor still returning from its wait)."""
    deadline = time.monotonic() + timeout_s
    for thread in list(_SERVING):
        thread.join(max(0.0, deadline - time.monotonic()))
    return [thread.name for thread in _SERVING if thread.is_alive()]


# An error reported by ``keep_serving`` is printed once in this long; the rest are counted.
ERROR_REPORT_PERIOD_S = 5.0
# Errors closer together than this pause serving for as long: an executor that fails on
# every wait, not on a callback, must not turn its thread into a busy loop.
ERROR_PAUSE_S = 0.01


def keep_serving(serve: Callable[[], None], context_ok: Callable[[], bool]) -> None:
    """Run ``serve`` (an executor's spin loop) until it returns or its context is shut
    down (``context_ok`` false). An error out of a callback that no CallbackGuard wraps
    (a FleetClient user's, rclpy's own) is printed and serving goes on: a thread that
    ended on it would leave its node deaf, and every caller waiting for an answer that
    never comes."""
    reported_at = failed_at = -ERROR_REPORT_PERIOD_S
    unreported = 0
    while True:
        try:
            serve()
            return
        except Exception:
            if not context_ok():
                return  # shut down under us (ExternalShutdownException and the like)
            now = time.monotonic()
            if now - failed_at < ERROR_PAUSE_S:
                time.sleep(ERROR_PAUSE_S)
            failed_at = now
            if now - reported_at < ERROR_REPORT_PERIOD_S:
                unreported += 1
                continue
            reported_at = now
            name = threading.current_thread().name
            print(
                f"{name}: error while serving ({unreported} more since the last report); "
                f"serving on:\n{traceback.format_exc()}",
                file=sys.stderr,
                flush=True,
            )
            unreported = 0


# The longest one wait of ``serve_events`` lasts, so how soon a stop is noticed: in this
# Jazzy the EventsExecutor's ``wake()`` does not end its ``spin_once``, nor can a guard
# condition be added to wake it; only the context's shutdown ends the wait at once. A
# wake-up costs little; ten a second were measurable on an idle agent host.
EVENTS_POLL_S = 1.0


def serve_events(
    executor: Executor,
    serving: Callable[[], bool],
    between_events: Callable[[], float] | None = None,
) -> None:
    """Serve ``executor`` (rclpy's EventsExecutor: a C++ event queue, no wait set rebuilt
    in Python per message) on this thread while ``serving()``.

    In the Jazzy wheels measured here its timers never fire and its ``spin()`` holds the
    GIL for good, so it is driven by ``spin_once`` with a timeout (which releases the GIL
    while waiting), and periodic work is ``between_events``: called after every event or
    timeout, it returns the seconds until it wants calling again. Its nodes create their
    entities before this starts, and no timers. A thread still in here when the context
    goes aborts the process: the context's owner stops it first."""
    wait_s = EVENTS_POLL_S
    while serving():
        executor.spin_once(timeout_sec=wait_s)
        if between_events is not None:
            wait_s = min(EVENTS_POLL_S, between_events())


class EventsSpinner:
    """Serve ``node`` on a daemon thread with ``serve_events``; ``shutdown`` joins the
    thread before it shuts the executor down."""

    def __init__(self, node: Node, thread_name: str) -> None:
        self._context = node.context
        self._executor = EventsExecutor(context=node.context)
        self._executor.add_node(node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()  # joined by ``shutdown``, which its owner calls

    def _run(self) -> None:
        keep_serving(
            lambda: serve_events(self._executor, lambda: not self._stop.is_set()),
            self._context.ok,
        )

    def shutdown(self, timeout_sec: float = 1.0) -> bool:
        self._stop.set()
        self._thread.join(timeout_sec + EVENTS_POLL_S)
        if self._thread.is_alive():
            return False  # still in a callback: shutting the executor under it would abort
        return bool(self._executor.shutdown(timeout_sec=timeout_sec))
