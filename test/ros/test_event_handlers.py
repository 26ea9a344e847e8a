"""No node of the package carries rclpy's default QoS event handlers.

Each handler is a waitable that the Python executors walk on every wake-up (and test for
list membership, so the cost grows with their square), while the defaults only log an
incompatible peer, which that peer logs too. The orchestrator and the hosted agents are
covered by their own tests; these are the nodes that wake per message beside them.
"""

from __future__ import annotations

from typing import Any

from rclpy.event_handler import EventHandler
from rclpy.node import Node


def event_handlers(*nodes: Node) -> list[EventHandler]:
    return [w for node in nodes for w in node.waitables if isinstance(w, EventHandler)]


def test_a_fleet_client_has_none_even_for_the_subscriptions_it_adds_while_spinning(
    ros_context: Any,
) -> None:
    from fleet_idempotency.ros.fleet_client import FleetClient

    client = FleetClient(ros_context, "handlers_client")
    try:
        client.on_results(lambda _result: None)
        client.on_events(lambda _event: None)
        client.on_status("amr_1", lambda _status: None)
        # The boot subscription, /parameter_events and the three added above.
        assert len(list(client.node.subscriptions)) >= 4
        assert event_handlers(client.node) == []
    finally:
        client.close()


def test_the_http_api_and_the_world_simulator_have_none(ros_context: Any) -> None:
    from fleet_idempotency.http.node import HttpApiNode
    from fleet_idempotency.sim.world_node import WorldSimulator

    http = HttpApiNode(context=ros_context)
    world = WorldSimulator(context=ros_context)
    try:
        # Results, event batches, a status per robot, diagnostics, boots.
        assert len(list(http.subscriptions)) + len(list(http.calls.subscriptions)) > 8
        assert event_handlers(http, http.calls, world) == []
    finally:
        for node in (http.calls, http, world):
            node.destroy_node()
