"""An agent's store counters on ``/diagnostics`` (diagnostic_msgs/DiagnosticArray).

What ROS users' tools (rqt_robot_monitor, diagnostic_aggregator) expect from a node: one
DiagnosticStatus per period, named after the node, ``hardware_id`` the robot, with the
store's counters and sizes as key/value pairs. ``store_status`` decides level and message
from plain data; ``StoreDiagnostics`` is the thin ROS side, and ``DiagnosticsPublisher``
sends the statuses of all agents of a process in one array per period.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from fleet_idempotency.ros.guard import CallbackGuard
from fleet_idempotency.store import IdempotencyStore

OK, WARN = 0, 1  # DiagnosticStatus.OK / WARN (bytes in the generated message)
PERIOD_S = 1.0
# Each robot's status goes out at least this often: within diagnostic_aggregator's default
# 5 s before it calls an item stale. A process of more robots than this many periods
# sends a share of them each period (``rotation``): collecting all 500 stores' figures
# and converting them to one message every second was most of an idle agent host's CPU.
REFRESH_PERIODS = 4
# Store figures worth a glance, in this order; the agent's own counters follow.
STORE_KEYS = (
    "records",
    "tombstones",
    "in_flight",
    "claims",
    "replays",
    "in_progress_hits",
    "mismatches",
    "expired_hits",
    "releases",
    "finishes",
    "gc_purged",
    "recovered_resumed",
    "recovered_interrupted",
    "recovered_reconciling",
    "store_full",
    "used_bytes",
    "claim_limit_bytes",
)
WARN_USED_FRACTION = 0.8


def store_status(
    stats: Mapping[str, Any], agent_counters: Mapping[str, int]
) -> tuple[int, str, list[tuple[str, str]]]:
    """(level, message, key/values) for one robot's store."""
    values = [(name, str(stats[name])) for name in STORE_KEYS if name in stats]
    values += [(f"agent.{name}", str(count)) for name, count in sorted(agent_counters.items())]
    limit = int(stats.get("claim_limit_bytes") or 0)
    used = int(stats.get("used_bytes") or 0)
    if int(stats.get("store_full") or 0) > 0:
        return WARN, "store refused claims (full) since start", values
    if limit and used > WARN_USED_FRACTION * limit:
        return WARN, f"store {used / limit:.0%} of its claim limit", values
    return OK, f"{stats.get('records', 0)} keys, {stats.get('in_flight', 0)} in flight", values


class StoreDiagnostics:
    """One robot's store status, for the process's /diagnostics array."""

    def __init__(
        self,
        node: Node,
        robot_id: str,
        store: IdempotencyStore,
        agent_counters: Mapping[str, int],
        *,
        guard: CallbackGuard | None = None,
    ) -> None:
        self._node = node
        self._robot_id = robot_id
        self._store = store
        self._agent_counters = agent_counters
        self._guard = guard

    def status(self) -> DiagnosticStatus:
        level, message, values = store_status(self._store.stats(), dict(self._agent_counters))
        return DiagnosticStatus(
            level=bytes([level]),
            name=f"{self._node.get_fully_qualified_name()}: idempotency store",
            message=message,
            hardware_id=self._robot_id,
            values=[KeyValue(key=key, value=value) for key, value in values],
        )

    def collect(self, into: list[DiagnosticStatus]) -> None:
        """Append this robot's status; a failure is this agent's (counted, logged), and
        never keeps the other agents' statuses from being published."""
        if self._guard is None:
            into.append(self.status())
        else:
            self._guard.timer("diagnostics", lambda: into.append(self.status()))()


def rotation(count: int, cursor: int, periods: int = REFRESH_PERIODS) -> tuple[range, int]:
    """Which of ``count`` sources to report this period, starting at ``cursor``, so that
    each is reported once every ``periods`` periods (or every period, when there are no
    more than ``periods``); and the cursor for the next period."""
    if count <= periods:
        return range(count), 0
    share = math.ceil(count / periods)
    start = cursor % count
    return range(start, start + share), (start + share) % count


class DiagnosticsPublisher:
    """Publishes the statuses of the agents of a process as one DiagnosticArray every
    ``PERIOD_S`` (monitoring tools take any number of statuses per array): one message
    per process and period instead of one per agent, each agent in it at least every
    ``REFRESH_PERIODS`` periods."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._publisher = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.sources: list[StoreDiagnostics] = []
        self._cursor = 0

    def publish(self) -> None:
        if self._publisher.get_subscription_count() == 0:
            return  # nobody monitors: the figures would cost the host and reach no one
        statuses: list[DiagnosticStatus] = []
        indices, self._cursor = rotation(len(self.sources), self._cursor)
        for index in indices:
            self.sources[index % len(self.sources)].collect(statuses)
        if not statuses:
            return
        array = DiagnosticArray(status=statuses)
        array.header.stamp = self._node.get_clock().now().to_msg()
        self._publisher.publish(array)
