"""The orchestrator's robot-facing endpoints: command publishers, status subscriptions,
CheckKey clients, and the results subscription.

CheckKey clients are made on first use, per robot asked: they serve only reconciliation
(a CheckKey the orchestrator cannot answer itself), and made up front they were half of
the orchestrator's DDS endpoints, 2 per robot. Fast DDS matches each local endpoint
against every remote one, so a restarted orchestrator of a 1,000-robot fleet spent most
of its time to see the fleet matching clients it might never use.

For 50 robots these are 50 status subscriptions, 50 CheckKey clients and 50 command
publishers with their QoS event handlers. rclpy rebuilds its wait set from every entity
of its nodes on each wake-up, in Python: on the orchestrator's main executor they made
every submit, result and tick wake-up cost O(fleet). So they live on side nodes:
status subscriptions on one with its own single-threaded executor (statuses are handled
in arrival order), the results subscription on another (a result wake-up then walks one
subscription, not 51), the CheckKey clients on a third (used only to reconcile, they
would otherwise double what every status wake-up walks), publishers on one that is never
spun (publishing needs no executor, and from any thread is safe).
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from builtin_interfaces.msg import Time
from rclpy.context import Context
from rclpy.event_handler import (
    QoSLivelinessChangedInfo,
    QoSRequestedIncompatibleQoSInfo,
    SubscriptionEventCallbacks,
)
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import qos_policy_name_from_kind

from fleet_idempotency.msg import CommandResult, FleetCommand, RobotStatus
from fleet_idempotency.protocol import Delivery
from fleet_idempotency.ros.convert import delivery_to_msg
from fleet_idempotency.ros.guard import CallbackGuard
from fleet_idempotency.ros.qos import (
    RELIABLE_TOPIC_QOS,
    SERVICE_QOS,
    STATUS_QOS,
    quiet_subscription_events,
)
from fleet_idempotency.ros.side_thread import EventsSpinner, side_node, spin_on_thread
from fleet_idempotency.srv import CheckKey


class RobotLinks:
    def __init__(
        self,
        context: Context,
        robot_ids: Iterable[str],
        *,
        on_status: Callable[[RobotStatus, str], None],
        on_liveliness: Callable[[str, bool], None],
        on_incompatible: Callable[[str, str], None],
        guard: CallbackGuard,
        counters: Counter[str],
        rng: random.Random,
        duplicate_probability: float = 0.0,
    ) -> None:
        self._counters = counters
        self._rng = rng
        self._duplicate_probability = duplicate_probability
        robot_ids = list(robot_ids)
        self._executors: list[SingleThreadedExecutor | EventsSpinner] = []
        self._listening = side_node("orchestrator_robot_links", context)
        self._checking = self._spun_node("orchestrator_robot_checks", context)
        self._results = self._spun_node("orchestrator_results", context)
        self._checks: dict[str, Any] = {}
        self._checks_lock = threading.Lock()
        for robot_id in robot_ids:
            # The topic says whose status it is: a status naming another robot is refused.
            # Its liveliness says when the robot's process is gone (ros/qos.py), so that an
            # idle robot need not send a status every second. The events executor below
            # takes QoS events from its queue: they cost nothing until one happens.
            self._listening.create_subscription(
                RobotStatus,
                f"/fleet/{robot_id}/status",
                guard.topic("robot_status", functools.partial(_heard_on, on_status, robot_id)),
                STATUS_QOS,
                event_callbacks=SubscriptionEventCallbacks(
                    liveliness=guard.topic(
                        "robot_liveliness", functools.partial(_liveliness, on_liveliness, robot_id)
                    ),
                    incompatible_qos=guard.topic(
                        "robot_status_qos",
                        functools.partial(_incompatible, on_incompatible, robot_id),
                    ),
                    use_default_callbacks=False,
                ),
            )
        # A status woke rclpy's Python executor, which walked all 50 subscriptions to take
        # it (~450 us of CPU per status here); the events executor takes it from a queue.
        self._executors.append(EventsSpinner(self._listening, "orchestrator_robot_links"))
        self._publishing = Node(
            "orchestrator_command_links", context=context, start_parameter_services=False
        )
        self._commands = {
            robot_id: self._publishing.create_publisher(
                FleetCommand, f"/fleet/{robot_id}/commands", RELIABLE_TOPIC_QOS
            )
            for robot_id in robot_ids
        }

    def check_client(self, robot_id: str) -> Any:
        """The robot's CheckKey client, made the first time it is asked for."""
        with self._checks_lock:
            client = self._checks.get(robot_id)
            if client is None:
                client = self._checking.create_client(
                    CheckKey, f"/fleet/{robot_id}/check_key", qos_profile=SERVICE_QOS
                )
                self._checks[robot_id] = client
            return client

    def _spun_node(self, name: str, context: Context) -> Node:
        """A side node (ros/side_thread.py) spun on a thread of its own."""
        node = side_node(name, context)
        self._executors.append(spin_on_thread(node, name))
        return node

    def listen_to_results(self, on_result: Callable[[CommandResult], None]) -> None:
        """Robots' answers, on a thread and node of their own: on the main multi-threaded
        executor each one also paid a hand-off to a pool thread and that executor's
        per-callback bookkeeping, and beside the status subscriptions each one walked all
        50 of them. Subscribed once the caller is ready to handle them."""
        self._results.create_subscription(
            CommandResult,
            "/fleet/results",
            on_result,
            RELIABLE_TOPIC_QOS,
            event_callbacks=quiet_subscription_events(),
        )

    def send(self, delivery: Delivery, stamp: Time) -> None:
        message = delivery_to_msg(delivery, stamp)
        publisher = self._commands[delivery.robot_id]
        publisher.publish(message)
        if self._duplicate_probability and self._rng.random() < self._duplicate_probability:
            publisher.publish(message)  # fault injection: the same delivery twice
            self._counters["injected_duplicate_deliveries"] += 1

    def close(self) -> None:
        for executor in self._executors:
            executor.shutdown(timeout_sec=1.0)
        for node in (self._listening, self._checking, self._results, self._publishing):
            node.destroy_node()


def _liveliness(
    on_liveliness: Callable[[str, bool], None], robot_id: str, info: QoSLivelinessChangedInfo
) -> None:
    if info.alive_count_change > 0:
        on_liveliness(robot_id, True)
    elif info.alive_count == 0 and info.alive_count_change < 0:
        on_liveliness(robot_id, False)


def _incompatible(
    on_incompatible: Callable[[str, str], None],
    robot_id: str,
    info: QoSRequestedIncompatibleQoSInfo,
) -> None:
    on_incompatible(robot_id, qos_policy_name_from_kind(info.last_policy_kind))


def _heard_on(
    on_status: Callable[[RobotStatus, str], None], robot_id: str, message: RobotStatus
) -> None:
    on_status(message, robot_id)


# A request sent just after a client was made can be lost while the robot's reply writer
# has not yet matched the new client's reader: asked again after this long (CheckKey
# only reads, so asking twice is harmless).
CHECK_RESEND_S = 0.5


def ask_check_key(client: Any, robot_key: str, timeout_s: float) -> Any | None:
    """The robot's CheckKey answer for ``robot_key``, or None if none came in ``timeout_s``
    (the robot is offline, or its service was not discovered in time)."""
    deadline = time.monotonic() + timeout_s
    while not client.service_is_ready():
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)
    while (remaining := deadline - time.monotonic()) > 0:
        future = client.call_async(CheckKey.Request(idempotency_key=robot_key))
        done = threading.Event()
        future.add_done_callback(lambda _future, done=done: done.set())
        if done.wait(min(CHECK_RESEND_S, remaining)):
            return future.result()
        client.remove_pending_request(future)
    return None
