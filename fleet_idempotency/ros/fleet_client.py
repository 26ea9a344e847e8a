"""A client of the fleet's API, as a warehouse system would use it.

Calls are retried with the *same* idempotency key whenever no answer arrives in time
(the orchestrator restarting, a lost reply): that is the retry this package makes safe.
The ExecuteCommand action (``execute``) is retried the same way: a goal that is not
accepted in time, or whose orchestrator was replaced, is sent again under a new goal UUID
and the same key, and attaches to the same command.
Thread-safe: many worker threads may submit at once; one executor thread spins.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import rclpy
from rclpy.action import ActionClient
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor

from fleet_idempotency.action import ExecuteCommand
from fleet_idempotency.msg import (
    CommandResult,
    FleetEvent,
    FleetEventBatch,
    OrchestratorBoot,
    RobotStatus,
)
from fleet_idempotency.ros.orchestrator_boots import OrchestratorBoots
from fleet_idempotency.ros.qos import (
    BOOT_QOS,
    RELIABLE_TOPIC_QOS,
    SERVICE_QOS,
    STATUS_QOS,
    drop_default_event_handlers,
    quiet_subscription_events,
)
from fleet_idempotency.ros.side_thread import start_serving_thread
from fleet_idempotency.srv import CheckKey, GetWorldState, SubmitCommand

FIRST_RESEND_S = 3.0
# After some answer arrived, how long to give the first send's answer to arrive as well.
EARLIEST_ANSWER_GRACE_S = 1.0


class NoAnswer(TimeoutError):
    """The service did not answer within the overall deadline, re-sends included."""


@dataclass(frozen=True)
class _Send:
    server: Any  # the rclpy client it went through
    future: Any
    # How many times the process serving there had been replaced when this was sent (the
    # first boot id heard may arrive after a first send: that is no replacement).
    replacements: int


@dataclass(frozen=True)
class Submitted:
    response: SubmitCommand.Response
    calls: int  # how many times the request was sent (1 + client-side re-sends)
    seconds: float


@dataclass(frozen=True)
class Executed:
    """The result of an ExecuteCommand goal, and how it was reached."""

    result: ExecuteCommand.Result
    status: int  # the goal's status (action_msgs/GoalStatus: 4 SUCCEEDED, 5 CANCELED, 6 ABORTED)
    goals: int  # how many goals were sent for the key (1 + re-sends under new UUIDs)
    seconds: float
    feedback: list[ExecuteCommand.Feedback]


class FleetClient:
    def __init__(
        self,
        context: Context | None = None,
        name: str = "fleet_client",
        *,
        api_namespace: str | Sequence[str] = "/fleet",
        first_resend_s: float = FIRST_RESEND_S,
    ) -> None:
        """``api_namespace``: where the orchestrator's services are; several (replicas):
        a re-send goes to the next one, so a dead replica costs one patience, no more.
        ``first_resend_s``: the longest a first send waits for its answer."""
        self.context = context or rclpy.get_default_context()
        self.first_resend_s = first_resend_s
        self.node = rclpy.create_node(name, context=self.context)
        namespaces = [api_namespace] if isinstance(api_namespace, str) else list(api_namespace)
        self._submit = [
            self.node.create_client(
                SubmitCommand, f"{namespace}/submit_command", qos_profile=SERVICE_QOS
            )
            for namespace in namespaces
        ]
        self._check = [
            self.node.create_client(CheckKey, f"{namespace}/check_key", qos_profile=SERVICE_QOS)
            for namespace in namespaces
        ]
        self._world = self.node.create_client(
            GetWorldState, "/world/state", qos_profile=SERVICE_QOS
        )
        self._actions = [
            ActionClient(
                self.node,
                ExecuteCommand,
                f"{namespace}/execute_command",
                goal_service_qos_profile=SERVICE_QOS,
                result_service_qos_profile=SERVICE_QOS,
                cancel_service_qos_profile=SERVICE_QOS,
                feedback_sub_qos_profile=RELIABLE_TOPIC_QOS,
            )
            for namespace in namespaces
        ]
        # Which orchestrator process serves each namespace (OrchestratorBoot.msg): a
        # request sent to one that has since been replaced is re-sent at once.
        self._boots = OrchestratorBoots()
        self._namespace_of: dict[int, str] = {}
        for namespace, submit, check, action in zip(
            namespaces, self._submit, self._check, self._actions, strict=True
        ):
            self._namespace_of[id(submit)] = self._namespace_of[id(check)] = namespace
            self._namespace_of[id(action)] = namespace
            self.node.create_subscription(
                OrchestratorBoot,
                f"{namespace}/boot",
                functools.partial(self._on_boot, namespace),
                BOOT_QOS,
            )
        # No QoS event handlers here nor on the subscriptions added later (on_results, ...):
        # the executor walks every one on every wake-up, and the client wakes per message.
        drop_default_event_handlers(self.node)
        # Its callbacks only set events and hand messages on. rclpy's MultiThreadedExecutor
        # kept a core busy here while submits waited, and the demo's latency rose
        # seven-fold (docs/design.md, "The ROS client").
        self._executor = SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self.node)
        self._thread = start_serving_thread(self._executor, "fleet-client")

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=2.0)
        # The spin thread must be gone before the context is shut down and the process
        # exits, or the C++ runtime aborts ("terminate called without an active exception").
        self._thread.join(timeout=5.0)
        self.node.destroy_node()

    # --- subscriptions ----------------------------------------------------------------------
    def on_results(self, callback: Callable[[CommandResult], None]) -> None:
        self.node.create_subscription(
            CommandResult,
            "/fleet/results",
            callback,
            RELIABLE_TOPIC_QOS,
            event_callbacks=quiet_subscription_events(),
        )

    def on_events(self, callback: Callable[[FleetEvent], None]) -> None:
        """Every event, in order; taken in the orchestrator's batches (one message per
        commit of its log, see FleetEventBatch.msg), so following the log costs no one a
        message per event."""

        def each(batch: FleetEventBatch) -> None:
            for event in batch.events:
                callback(event)

        self.node.create_subscription(
            FleetEventBatch,
            "/fleet/event_batches",
            each,
            RELIABLE_TOPIC_QOS,
            event_callbacks=quiet_subscription_events(),
        )

    def on_status(self, robot_id: str, callback: Callable[[RobotStatus], None]) -> None:
        self.node.create_subscription(
            RobotStatus,
            f"/fleet/{robot_id}/status",
            callback,
            STATUS_QOS,
            event_callbacks=quiet_subscription_events(),
        )

    # --- calls ------------------------------------------------------------------------------
    def _on_boot(self, namespace: str, message: OrchestratorBoot) -> None:
        self._boots.heard(namespace, message.boot_id)

    def _replacements_of(self, server: Any) -> int:
        namespace = self._namespace_of.get(id(server))  # None: the world's service
        return self._boots.replacements(namespace) if namespace is not None else 0

    def _lost(self, send: _Send) -> bool:
        """Sent to an orchestrator process that has since been replaced: no answer comes."""
        return self._replacements_of(send.server) > send.replacements

    def _call(
        self, servers: list[Any], request: Any, *, patience_s: float, deadline_s: float
    ) -> tuple[Any, int]:
        """Send ``request``; re-send it every ``patience_s`` without an answer, each time to
        the next of ``servers`` (replicas share one store: any of them may answer), and at
        once when the process it went to is replaced (a new boot id)."""
        wake = threading.Event()
        sends: list[_Send] = []
        turn = 0
        give_up = time.monotonic() + deadline_s
        with self._boots.waking(wake.set):
            while True:
                client = servers[turn % len(servers)]
                remaining = max(0.0, give_up - time.monotonic())
                # No server seen yet: look again soon rather than after a whole patience.
                # A first send (or the first to a restarted server) gets a short patience:
                # right after discovery a request or its reply is sometimes lost, and
                # re-sending is always safe.
                live = [send for send in sends if not self._lost(send)]
                patience = min(patience_s, self.first_resend_s) if not live else patience_s
                wait_s = min(patience, remaining) if client.service_is_ready() else 0.0
                turn += 1
                if wait_s > 0:
                    future = client.call_async(request)
                    future.add_done_callback(lambda _f: wake.set())
                    sends.append(_Send(client, future, self._replacements_of(client)))
                elif remaining > 0:
                    client.wait_for_service(timeout_sec=min(0.5, remaining) / len(servers))
                    continue
                if self._wait_for_answer_or_loss(sends, wake, wait_s):
                    return self._earliest_answer(sends), len(sends)
                if time.monotonic() >= give_up:
                    self._forget(sends)
                    raise NoAnswer(
                        f"no answer from {client.srv_name} after {deadline_s:.0f} s "
                        f"({len(sends)} sends)"
                    )

    def _wait_for_answer_or_loss(
        self, sends: list[_Send], wake: threading.Event, wait_s: float
    ) -> bool:
        """True once a send is answered; False after ``wait_s``, or as soon as a send is
        lost with a replaced server (then re-sending cannot wait)."""
        until = time.monotonic() + wait_s
        lost = sum(self._lost(send) for send in sends)
        while True:
            woken = wake.wait(max(0.0, until - time.monotonic()))
            wake.clear()
            if any(send.future.done() for send in sends):
                return True
            if not woken or sum(self._lost(send) for send in sends) > lost:
                return False

    def _earliest_answer(self, sends: list[_Send]) -> Any:
        """The answer to the earliest send still alive. A re-send that overtook a slow
        first request is a duplicate at the server (409, then "replayed"), while the caller
        asked once; waits on one key all end at the same finish, so the first request's
        answer follows within moments. A send to a replaced process is never answered."""
        live = [send for send in sends if not self._lost(send)]
        if live and not live[0].future.done():
            settled = threading.Event()
            live[0].future.add_done_callback(lambda _f: settled.set())
            settled.wait(EARLIEST_ANSWER_GRACE_S)
        done = next(send for send in live + sends if send.future.done())
        self._forget(sends)
        return done.future.result()

    @staticmethod
    def _forget(sends: list[_Send]) -> None:
        for send in sends:
            if not send.future.done():
                send.server.remove_pending_request(send.future)

    def submit(
        self,
        client_id: str,
        key: str,
        robot_id: str,
        command_type: str,
        payload: dict[str, Any] | str,
        *,
        wait_timeout_s: float = 0.0,
        patience_s: float = 5.0,
        deadline_s: float = 120.0,
    ) -> Submitted:
        payload_json = payload if isinstance(payload, str) else json.dumps(payload)
        request = SubmitCommand.Request(
            client_id=client_id,
            idempotency_key=key,
            robot_id=robot_id,
            command_type=command_type,
            payload_json=payload_json,
            wait_timeout_sec=float(wait_timeout_s),
        )
        started = time.monotonic()
        response, calls = self._call(
            self._submit, request, patience_s=wait_timeout_s + patience_s, deadline_s=deadline_s
        )
        return Submitted(response, calls, time.monotonic() - started)

    def execute(
        self,
        client_id: str,
        key: str,
        robot_id: str,
        command_type: str,
        payload: dict[str, Any] | str,
        *,
        patience_s: float = 5.0,
        deadline_s: float = 120.0,
        on_feedback: Callable[[Any], None] | None = None,
    ) -> Executed:
        """Send an ExecuteCommand goal and wait for its result. Deduplication is by key,
        not by goal UUID: a goal not accepted within ``patience_s``, or sent to an
        orchestrator process that has since been replaced, is sent again (to the next
        namespace, under a new UUID) with the same key, and attaches to the same command.
        An accepted goal is waited for as long as its orchestrator lives (commands take
        their time), up to ``deadline_s`` in all."""
        goal = ExecuteCommand.Goal(
            client_id=client_id,
            idempotency_key=key,
            robot_id=robot_id,
            command_type=command_type,
            payload_json=payload if isinstance(payload, str) else json.dumps(payload),
        )
        started = time.monotonic()
        give_up = started + deadline_s
        feedback: list[Any] = []

        def on_message(message: Any) -> None:
            feedback.append(message.feedback)
            if on_feedback is not None:
                on_feedback(message.feedback)

        wake = threading.Event()
        goals = turn = 0
        with self._boots.waking(wake.set):
            while time.monotonic() < give_up:
                action = self._actions[turn % len(self._actions)]
                turn += 1
                if not action.server_is_ready():
                    wake.wait(min(0.1, max(0.0, give_up - time.monotonic())))
                    wake.clear()
                    continue
                replacements = self._replacements_of(action)
                goals += 1
                accepted = self._on_spin_thread(
                    functools.partial(action.send_goal_async, goal, feedback_callback=on_message)
                )
                handle = self._await(
                    accepted, wake, action, replacements, patience_s=patience_s, give_up=give_up
                )
                if handle is None or not handle.accepted:
                    continue  # no accept in time, or its orchestrator went: a new goal
                result = self._on_spin_thread(handle.get_result_async)
                response = self._await(
                    result, wake, action, replacements, patience_s=None, give_up=give_up
                )
                if response is None:
                    continue
                return Executed(
                    response.result, response.status, goals, time.monotonic() - started, feedback
                )
        raise NoAnswer(f"no result for {client_id}/{key} after {deadline_s:.0f} s ({goals} goals)")

    def _on_spin_thread(self, call: Callable[[], Any]) -> Any:
        """``call()`` run by the executor's thread, its return value: rclpy's ActionClient
        is not thread-safe (a response taken before the request's future is registered
        is dropped as unexpected), so its requests are made where its responses are taken."""
        task = self._executor.create_task(call)
        done = threading.Event()
        task.add_done_callback(lambda _task: done.set())
        if not done.wait(10.0):
            raise NoAnswer("the client's executor thread did not run the request")
        return task.result()

    def _await(
        self,
        future: Any,
        wake: threading.Event,
        action: Any,
        replacements: int,
        *,
        patience_s: float | None,
        give_up: float,
    ) -> Any:
        """The future's result; None after ``patience_s`` (None: no limit), when the
        orchestrator that had the request was replaced, or at ``give_up``."""
        future.add_done_callback(lambda _f: wake.set())
        until = give_up if patience_s is None else min(give_up, time.monotonic() + patience_s)
        while not future.done():
            if self._replacements_of(action) > replacements or time.monotonic() >= until:
                return None
            wake.wait(max(0.0, until - time.monotonic()))
            wake.clear()
        return future.result()

    def check(self, client_id: str, key: str, *, deadline_s: float = 30.0) -> Any:
        request = CheckKey.Request(client_id=client_id, idempotency_key=key)
        return self._call(self._check, request, patience_s=3.0, deadline_s=deadline_s)[0]

    def world_state(self, *, deadline_s: float = 30.0) -> dict[str, Any]:
        response = self._call(
            [self._world], GetWorldState.Request(), patience_s=3.0, deadline_s=deadline_s
        )[0]
        state: dict[str, Any] = json.loads(response.state_json)
        return state

    def wait_for_services(self, timeout_s: float = 60.0) -> None:
        """Block until the orchestrator and the world answer (not merely appear)."""
        self.check("fleet_client", "readiness-probe", deadline_s=timeout_s)
        self.world_state(deadline_s=timeout_s)
