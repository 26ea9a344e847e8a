"""What the fleet's topics say, held for the API: recent events, robots' status.

Events come from ``/fleet/event_batches`` into a bounded ring (newest ``ring_size``); history
older than the ring is in the orchestrator's event log (``fleet-idem-events``). Robot
status comes from ``/fleet/<robot>/status``. Written by ROS callback threads, read by
the HTTP event loop; server-sent-event streams are woken through their event loop.
No ROS imports: the node converts messages into the dicts below.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from .auth import Caller
from .metrics import HttpMetrics

FINAL_EVENT_TYPES = ("result", "interrupted")


@dataclass
class RobotView:
    robot_id: str
    robot_type: str
    x: float = 0.0
    y: float = 0.0
    theta: float = 0.0
    queue_depth: int = 0
    capacity: int = 0
    busy: bool = False
    current_key: str = ""
    # The robot's backend can take commands; if not, what it waits for (its simulator,
    # its controller): a robot online but not ready holds its commands back.
    ready: bool = True
    waiting_for: str = ""
    seen_at: float = 0.0  # monotonic; 0: never
    # The orchestrator's robot_offline event, after the last status: it knows at once when
    # the robot's process is gone (DDS liveliness), long before an idle robot's silence
    # would say so here.
    gone: bool = False


class FleetView:
    def __init__(
        self,
        robots: list[RobotView],
        metrics: HttpMetrics,
        *,
        ring_size: int = 10_000,
        offline_after_s: float = 30.0,
    ) -> None:
        self._metrics = metrics
        self._offline_after_s = offline_after_s
        self._lock = threading.Lock()
        self._events: deque[dict[str, Any]] = deque(maxlen=ring_size)
        # Seeded from the fleet file (start poses), so a robot never heard from is still
        # drawn where it should be, as offline.
        self._robots = {robot.robot_id: robot for robot in robots}
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    # --- writers (ROS threads) --------------------------------------------------------------
    def add_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            # Sequences only go up, also across orchestrator restarts (the log is durable):
            # one already held is a duplicate delivery.
            if (
                self._events
                and event["sequence"] <= self._events[-1]["sequence"]
                and any(e["sequence"] == event["sequence"] for e in self._events)
            ):
                return
            self._events.append(event)
            size = len(self._events)
            waiters = list(self._waiters)
        kind = event["event_type"]
        if kind in ("robot_offline", "robot_online"):
            self._note_presence(event["robot_id"], gone=kind == "robot_offline")
        self._metrics.events.labels(kind).inc()
        self._metrics.event_log_sequence.set(event["sequence"])
        self._metrics.event_ring_size.set(size)
        if kind == "dispatched":
            self._metrics.dispatches.inc()
        elif kind == "retried":
            self._metrics.resends.inc()
        elif kind in FINAL_EVENT_TYPES:
            self._metrics.submit_finished(event["client_id"], event["idempotency_key"])
        for loop, waiter in waiters:
            loop.call_soon_threadsafe(waiter.set)

    def _note_presence(self, robot_id: str, *, gone: bool) -> None:
        with self._lock:
            robot = self._robots.get(robot_id)
            if robot is not None:
                robot.gone = gone

    def update_robot(self, status: dict[str, Any]) -> None:
        robot_id = status["robot_id"]
        with self._lock:
            robot = self._robots.setdefault(robot_id, RobotView(robot_id, status["robot_type"]))
            for name, value in status.items():
                setattr(robot, name, value)
            robot.seen_at = time.monotonic()
            robot.gone = False
        self._metrics.queue_depth.labels(robot_id).set(status["queue_depth"])
        self._metrics.capacity.labels(robot_id).set(status["capacity"])

    # --- readers ----------------------------------------------------------------------------
    def robot_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._robots)

    def robots(self, caller: Caller) -> list[dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            views = [RobotView(**vars(robot)) for robot in self._robots.values()]
        return [
            {
                "robot_id": r.robot_id,
                "robot_type": r.robot_type,
                "online": not r.gone and r.seen_at > 0 and now - r.seen_at < self._offline_after_s,
                "pose": {"x": r.x, "y": r.y, "theta": r.theta},
                "queue_depth": r.queue_depth,
                "capacity": r.capacity,
                "busy": r.busy,
                "ready": r.ready,
                "waiting_for": r.waiting_for,
                # Robot-side keys are "<client>:<key>": a client sees only its own.
                "current_key": r.current_key if caller.owns_robot_key(r.current_key) else "",
            }
            for r in sorted(views, key=lambda view: view.robot_id)
        ]

    def events(self, caller: Caller, after: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        """Events with sequence > ``after`` that ``caller`` may see; and the oldest held."""
        with self._lock:
            held = list(self._events)
        oldest = held[0]["sequence"] if held else 0
        visible = [
            e
            for e in held
            if e["sequence"] > after
            and (caller.operator or e["client_id"] in ("", caller.client_id))
        ]
        return visible[:limit], oldest

    def subscribe(self) -> asyncio.Event:
        waiter = asyncio.Event()
        with self._lock:
            self._waiters.add((asyncio.get_running_loop(), waiter))
        return waiter

    def unsubscribe(self, waiter: asyncio.Event) -> None:
        with self._lock:
            self._waiters = {pair for pair in self._waiters if pair[1] is not waiter}
