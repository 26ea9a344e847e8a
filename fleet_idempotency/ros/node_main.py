"""The shared ``main()`` body of this package's node executables.

Shutdown on SIGINT/SIGTERM is the normal way these nodes end: the context is shut down
(``stop_signals``, not rclpy's own handler, whose wake-up can come before the shutdown
and be lost), and the executor then raises ExternalShutdownException, or, when the
shutdown lands while a wait set is being built, an RCLError about the invalid context.
Both are a clean exit; any error while the context is still valid is not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import rclpy
from pydantic import ValidationError
from rclpy.executors import (
    Executor,
    ExternalShutdownException,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
)
from rclpy.experimental import EventsExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from fleet_idempotency.auth import KeyringError
from fleet_idempotency.description.fleet import FleetConfigError
from fleet_idempotency.events import EventLogError
from fleet_idempotency.protocol import EXIT_STARTUP_ERROR
from fleet_idempotency.ros.parent_watch import arm_shutdown_deadline, watch_parent
from fleet_idempotency.ros.side_thread import serve_events
from fleet_idempotency.ros.stop_signals import run_before_stop, shut_down_on_stop_signals
from fleet_idempotency.store import StoreError

# Errors a user can fix (a bad fleet file, a store from elsewhere, an unusable backend,
# whose BackendError is a ValueError):
# reported as one clear line, not a traceback.
STARTUP_ERRORS = (
    KeyringError,
    FleetConfigError,
    StoreError,
    EventLogError,
    ValidationError,
    ValueError,
)


def make_executor(kind: str, threads: int) -> Executor:
    """``single``: one thread, the cheapest wake-up rclpy's Python executors have;
    ``multi``: MultiThreadedExecutor, for nodes whose callbacks block (waiting submits).
    (``events`` is not an executor handed out: see ``spin_events``.)"""
    if kind == "multi":
        return MultiThreadedExecutor(num_threads=threads)
    if kind == "single":
        return SingleThreadedExecutor()
    raise ValueError(f"unknown executor {kind!r} (events, multi or single)")


def spin_events(nodes: Sequence[Node], between_events: Callable[[], float] | None = None) -> None:
    """Serve ``nodes`` with rclpy's EventsExecutor on this thread (``serve_events``) until
    the context shuts down, which also ends the wait at once."""
    executor = EventsExecutor()
    for node in nodes:
        executor.add_node(node)
    try:
        serve_events(executor, rclpy.ok, between_events)
    finally:
        executor.shutdown(timeout_sec=1.0)


def _stop() -> None:
    """A stop signal: last words over DDS (``before_stop``), then the context goes."""
    run_before_stop()
    rclpy.try_shutdown()


def run_nodes(
    name: str,
    make_nodes: Callable[[], Sequence[Node]],
    *,
    threads: int = 4,
    executor: str = "multi",
    args: list[str] | None = None,
    between_events: Callable[[], float] | None = None,
) -> None:
    """``executor``: ``single``, ``multi`` (``threads``) or ``events`` (``spin_events``,
    which calls ``between_events``)."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    shut_down_on_stop_signals(_stop)
    watch_parent()
    nodes: Sequence[Node] = []
    try:
        try:
            nodes = make_nodes()
        except STARTUP_ERRORS as error:
            print(f"{name}: cannot start: {error}", file=sys.stderr)
            raise SystemExit(EXIT_STARTUP_ERROR) from None
        if executor == "events":
            spin_events(nodes, between_events)
        else:
            spinner = make_executor(executor, threads)
            for node in nodes:
                spinner.add_node(node)
            spinner.spin()
    except ExternalShutdownException:
        pass
    except Exception:
        if rclpy.ok():
            raise
    finally:
        arm_shutdown_deadline()
        for node in nodes:
            shutdown = getattr(node, "shutdown", None)
            if shutdown is not None:
                shutdown()
            node.destroy_node()
        rclpy.try_shutdown()
