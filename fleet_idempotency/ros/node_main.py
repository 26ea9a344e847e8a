"""The shared ``main()`` body of this package's node executables.

Shutdown on SIGINT/SIGTERM is the normal way these nodes end: the context is shut down
(``stop_signals``, not rclpy's own handler, whose wake-up can come before the shutdown
and be lost), and the executor then raises ExternalShutdownException, or, when the
shutdown lands while a wait set is being built, an RCLError about the invalid context.
Both are a clean exit; any error while the context is still valid is not. A stop that
comes while the nodes are still being made is a clean exit too, whatever error the
shut-down context then gives their constructors.
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
from fleet_idempotency.ros import stop_signals
from fleet_idempotency.ros.parent_watch import arm_shutdown_deadline, watch_parent
from fleet_idempotency.ros.side_thread import join_serving_threads, serve_events
from fleet_idempotency.ros.stop_signals import run_before_stop
from fleet_idempotency.ros.teardown_backstop import participant_teardown_backstop
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


# Side executors leave their wait as soon as the context is shut down; the shutdown
# deadline (parent_watch) still bounds a wait that does not end.
SIDE_THREADS_JOIN_S = 5.0


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
    stops = stop_signals.install()  # already done by the executables' entry points
    if stops.received.is_set():
        return
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    # Made while no stop can have shut the context down yet: an executor made on a
    # shut-down context fails half-built, and its __del__ prints "Exception ignored".
    spinner = None if executor == "events" else make_executor(executor, threads)
    stops.on_stop(_stop)
    watch_parent()
    nodes: Sequence[Node] = []
    try:
        try:
            nodes = make_nodes()
        except STARTUP_ERRORS as error:
            if stops.received.is_set():
                return  # stopped while starting: the error is the shutdown's
            print(f"{name}: cannot start: {error}", file=sys.stderr)
            raise SystemExit(EXIT_STARTUP_ERROR) from None
        if spinner is None:
            spin_events(nodes, between_events)
        else:
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
        # Side executors first, out of rclpy, then every node's own shutdown (stores
        # closed), and only then the nodes: the last one takes the DDS participant with
        # it, a teardown Fast DDS can deadlock in (teardown_backstop).
        rclpy.try_shutdown()
        join_serving_threads(SIDE_THREADS_JOIN_S)
        for node in nodes:
            shutdown = getattr(node, "shutdown", None)
            if shutdown is not None:
                shutdown()
        with participant_teardown_backstop(name):
            for node in nodes:
                node.destroy_node()
