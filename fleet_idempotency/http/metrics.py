"""Prometheus metrics of the HTTP front door and of the fleet as its topics show it.

One registry per app (not the process-global default), so several apps in one process
(tests, benchmarks) never share counters.
"""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Outcomes of a submit, by what the fleet answered (the vocabulary).
SUBMIT_OUTCOMES = (
    "new",
    "replay",
    "in_progress",
    "mismatch",
    "invalid",
    "busy",
    "expired",
    "unavailable",
    "failed",
)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
MAX_TRACKED_SUBMITS = 100_000


def outcome_of(status: int, replayed: bool) -> str:
    if replayed:
        return "replay"
    return {
        200: "new",
        202: "new",
        400: "invalid",
        409: "in_progress",
        410: "expired",
        422: "mismatch",
        429: "busy",
        503: "unavailable",
    }.get(status, "failed" if status >= 500 else "invalid")


class HttpMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.submits = Counter(
            "fleet_http_submits", "Submits over HTTP by outcome", ["outcome"], registry=r
        )
        self.requests_in_flight = Gauge(
            "fleet_http_requests_in_flight",
            "Submits being answered, per client",
            ["client_id"],
            registry=r,
        )
        self.submit_to_final = Histogram(
            "fleet_http_submit_to_final_seconds",
            "From an HTTP submit of a new key to its final result",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.dispatches = Counter(
            "fleet_dispatches", "Commands dispatched to robots (first delivery)", registry=r
        )
        self.resends = Counter("fleet_resends", "Re-sends of a command to its robot", registry=r)
        self.results = Counter(
            "fleet_results",
            "Robot results seen on /fleet/results, by state",
            ["state"],
            registry=r,
        )
        self.events = Counter("fleet_events", "Fleet events by type", ["event_type"], registry=r)
        self.event_log_sequence = Gauge(
            "fleet_event_log_sequence", "Highest event sequence seen (the log's size)", registry=r
        )
        self.event_ring_size = Gauge(
            "fleet_http_event_ring_events", "Events held for paging and streaming", registry=r
        )
        self.queue_depth = Gauge(
            "fleet_robot_queue_depth",
            "Commands accepted and not finished",
            ["robot_id"],
            registry=r,
        )
        self.capacity = Gauge(
            "fleet_robot_capacity", "Robot queue capacity", ["robot_id"], registry=r
        )
        self.store_records = Gauge(
            "fleet_robot_store_records",
            "Keys in a robot's store (from /diagnostics)",
            ["robot_id"],
            registry=r,
        )
        self._lock = threading.Lock()
        self._started: dict[tuple[str, str], float] = {}

    def submit_started(self, client_id: str, key: str, started: float) -> None:
        """A new key was accepted, not finished in the call: time it until its result event."""
        with self._lock:
            if len(self._started) >= MAX_TRACKED_SUBMITS:
                self._started.pop(next(iter(self._started)))
            self._started.setdefault((client_id, key), started)

    def submit_finished(self, client_id: str, key: str) -> None:
        with self._lock:
            started = self._started.pop((client_id, key), None)
        if started is not None:
            self.submit_to_final.observe(time.monotonic() - started)
