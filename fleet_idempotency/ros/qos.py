"""Quality-of-service profiles shared by every endpoint of the package.

Services default to KEEP_LAST 10: with more than ten requests outstanding on one client
(a burst of submits, a robot streaming pose updates to the world) DDS overwrites the
oldest in the writer's history and that request is silently lost. A deep reliable
history keeps every request and reply of a burst.
"""

from __future__ import annotations

from rclpy.duration import Duration
from rclpy.event_handler import EventHandler, SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    LivelinessPolicy,
    QoSProfile,
    ReliabilityPolicy,
)
from rclpy.subscription import Subscription

SERVICE_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1000,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
# Commands and results: every message matters and bursts happen (a retry wave after a
# robot returns), so the same depth.
RELIABLE_TOPIC_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
# Only the latest message matters, and a subscriber that joins late gets it at once. A
# transient-local subscription needs a transient-local publisher.
LATEST_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
# An orchestrator's boot id (OrchestratorBoot.msg), for clients that start after it.
BOOT_QOS = LATEST_QOS
# How soon a robot process that is gone (killed, crashed, frozen, cut off) is known to be:
# the lease of its status publisher's DDS liveliness. DDS asserts it for the whole
# process (one participant message per lease, whatever the number of robots in it), so
# an idle robot need not send a status every second to be known alive.
STATUS_LEASE_S = 2.0
# Robot statuses: a late subscriber (a restarted orchestrator, the HTTP API, or anyone when
# a robot's first status went out before they matched) hears the robot at once, not a
# heartbeat later; a subscriber with a liveliness callback hears of a robot process gone
# within STATUS_LEASE_S. Upgrade robots before the orchestrator: a volatile status
# publisher, or one that offers no liveliness lease (an agent before round 3), matches
# nothing here.
STATUS_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
    liveliness=LivelinessPolicy.AUTOMATIC,
    liveliness_lease_duration=Duration(seconds=STATUS_LEASE_S),
)


def drop_default_event_handlers(node: Node) -> int:
    """Destroy the QoS event handlers of ``node``'s publishers and subscriptions, taking
    them out of its wait set; return how many there were.

    rclpy gives every node's /parameter_events publisher default handlers, which only log
    an incompatible peer. The Python executors walk each node's waitables on every
    wake-up (with a list-membership test per waitable, so quadratic in their number): for
    a host of 25 agents those 50 handlers cost more than the agents' own subscriptions.
    Their owners forget them too, so destroying a publisher later does not look for them.
    """
    dropped = 0
    entities: list[Publisher | Subscription] = [*node.publishers, *node.subscriptions]
    for entity in entities:
        # rclpy annotates event_handlers as one EventHandler; it is a list of them.
        handlers: list[EventHandler] = list(entity.event_handlers)  # type: ignore[call-overload]
        entity.event_handlers = []  # type: ignore[assignment]
        for handler in handlers:
            node.remove_waitable(handler)
            handler.destroy()
        dropped += len(handlers)
    return dropped


def quiet_subscription_events() -> SubscriptionEventCallbacks:
    """Event callbacks for a subscription created while its node is spinning: none, not
    even rclpy's defaults. ``drop_default_event_handlers`` would then race the executor,
    which walks the node's waitables on its own thread."""
    return SubscriptionEventCallbacks(use_default_callbacks=False)
