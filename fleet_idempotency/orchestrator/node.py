"""Orchestrator node: the fleet's Unified Control API.

Services: ``/fleet/submit_command`` (SubmitCommand), ``/fleet/check_key`` (CheckKey); action
``/fleet/execute_command`` (ExecuteCommand, action_server.py); a replica serves them under
its own ``api_namespace`` (see replica.py), beside its ``<api_namespace>/boot``
(OrchestratorBoot, out, transient-local).
Topics: ``/fleet/event_batches`` (FleetEventBatch, out; ``/fleet/events``, FleetEvent, the
same one by one while anyone subscribes there), ``/fleet/results`` (CommandResult, in),
``/fleet/<robot_id>/commands`` (FleetCommand, out), ``/fleet/<robot_id>/status``
(RobotStatus, in). All logic lives in OrchestratorCore; this is the ROS shell.

    ros2 run fleet_idempotency orchestrator --ros-args -p fleet_file:=fleet.yaml
"""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node

from fleet_idempotency.auth import CommandSigner, FleetKeyring, KeyringError, WatchedKeyring
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.description.resources import default_fleet_file
from fleet_idempotency.events import EventLogConfig, FleetEventRecord, LmdbEventLog
from fleet_idempotency.msg import (
    CommandResult,
    FleetEvent,
    FleetEventBatch,
    OrchestratorBoot,
    RobotStatus,
)
from fleet_idempotency.orchestrator.action_server import ExecuteCommandServer
from fleet_idempotency.orchestrator.core import (
    OrchestratorCore,
    OrchestratorSettings,
    SubmitAnswer,
    SubmitRequest,
)
from fleet_idempotency.orchestrator.dispatch_loop import DispatchLoop
from fleet_idempotency.orchestrator.replica import (
    ReplicaLeases,
    ReplicaSettings,
    open_shared_log,
    open_shared_store,
)
from fleet_idempotency.orchestrator.robot_links import RobotLinks, ask_check_key
from fleet_idempotency.protocol import CONFLICT, INTERNAL, Delivery, KeyStatus
from fleet_idempotency.ros.convert import (
    InvalidMessage,
    answer_from_msg,
    check_key_failed,
    event_batches,
    event_to_msg,
    fill_check_key_response,
)
from fleet_idempotency.ros.guard import CallbackGuard
from fleet_idempotency.ros.node_main import run_nodes
from fleet_idempotency.ros.qos import (
    BOOT_QOS,
    RELIABLE_TOPIC_QOS,
    SERVICE_QOS,
    drop_default_event_handlers,
)
from fleet_idempotency.srv import CheckKey, SubmitCommand
from fleet_idempotency.store import IdempotencyStore, State, StoreConfig
from fleet_idempotency.store.urls import redacted_url

ROBOT_CHECK_TIMEOUT_S = 2.0
# Replicas: how often to look in the shared log for commands other replicas accepted for
# robots this one holds (one indexed read), and to sweep the store for unlogged claims.
FOLLOW_PERIOD_S = 0.05
SWEEP_PERIOD_S = 5.0
# A submit that waits for its final result holds an executor thread for the whole wait
# (rclpy's service callbacks must return the response, and its coroutine tasks busy-poll).
# Waits get their own share of threads and never all of them: if every thread could
# wait, results, statuses and the dispatch tick would starve and no wait could end
# before its timeout. Past the cap a submit is answered at once (202/409, as with
# wait_timeout_sec=0), and the caller polls CheckKey or re-submits.
MAX_WAITING_SUBMITS = 16
EXECUTOR_THREADS = MAX_WAITING_SUBMITS + 8


class Orchestrator(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("orchestrator", **kwargs)
        p = self._declare_parameters()
        fleet = load_fleet(Path(p["fleet_file"] or default_fleet_file()))
        root = Path(p["store_dir"]).expanduser()
        # The robot dedups every re-send, so the orchestrator resumes all of its in-flight
        # commands after a crash: none is interrupted, none is lost.
        store_settings: dict[str, Any] = {
            "default_retention_s": p["retention_s"],
            "tombstone_retention_s": p["tombstone_retention_s"],
            "default_recovery_policy": "resume",
            "recovery_policy_by_type": {},
            "durable": p["durable"],
        }
        self._replica: ReplicaSettings | None = None
        if p["store_url"]:
            # One of several replicas sharing a PostgreSQL database (see replica.py).
            self._replica = ReplicaSettings(
                store_url=p["store_url"], name=p["replica_name"], lease_ttl_s=p["lease_ttl_s"]
            )
            self.store = open_shared_store(p["store_url"], **store_settings)
            self.events = open_shared_log(p["store_url"], durable=p["durable"])
        else:
            self.store = IdempotencyStore.open(StoreConfig(path=root / "keys", **store_settings))
            self.events = LmdbEventLog(EventLogConfig(path=root / "events", durable=p["durable"]))
        self._events_pub = self.create_publisher(FleetEvent, "/fleet/events", RELIABLE_TOPIC_QOS)
        self._event_batches_pub = self.create_publisher(
            FleetEventBatch, "/fleet/event_batches", RELIABLE_TOPIC_QOS
        )
        self._boot_pub = self.create_publisher(
            OrchestratorBoot, f"{p['api_namespace']}/boot", BOOT_QOS
        )
        # No QoS event handlers (rclpy's default ones only log an incompatible peer): each
        # is an entity that every wake-up of the executor walks, ~7 % of the orchestrator's
        # CPU under load for a log line nobody needs twice.
        drop_default_event_handlers(self)
        self._rng = random.Random(p["seed"] or None)
        self._reorder_probability = float(p["reorder_delivery_probability"])
        self._keyring = (
            WatchedKeyring(Path(p["auth_keyring"]).expanduser(), FleetKeyring)
            if p["auth_keyring"]
            else None
        )
        self.core = OrchestratorCore(
            fleet=fleet,
            store=self.store,
            events=self.events,
            settings=OrchestratorSettings(
                queue_capacity_per_robot=p["queue_capacity_per_robot"],
                retry_initial_s=p["retry_initial_s"],
                retry_min_s=p["retry_min_s"],
                retry_max_s=p["retry_max_s"],
                retry_jitter=p["retry_jitter"],
                acknowledged_resend_s=p["acknowledged_resend_s"],
                unanswered_per_robot=p["unanswered_per_robot"],
                offline_after_s=p["offline_after_s"],
                busy_pause_s=p["busy_pause_s"],
            ),
            on_events_appended=self._publish_events,
            rng=self._rng,
            signer=CommandSigner(self._keyring.keyring) if self._keyring else None,
            replicated=self._replica is not None,
        )
        if self._replica is None:
            self.core.restore()
        else:
            self.core.repair_log()
        self._wait_slots = threading.BoundedSemaphore(MAX_WAITING_SUBMITS)

        guard = CallbackGuard(
            self.get_logger(), self.core.counters, shutting_down=lambda: not self.context.ok()
        )
        api = ReentrantCallbackGroup()  # submits may wait for results: many at once
        # A deep request history: with the default depth of 10 a burst of submits from
        # one client loses requests, which the client only notices by its own timeout.
        self.create_service(
            SubmitCommand,
            f"{p['api_namespace']}/submit_command",
            guard.service("submit_command", self._on_submit, _submit_failed),
            qos_profile=SERVICE_QOS,
            callback_group=api,
        )
        self.create_service(
            CheckKey,
            f"{p['api_namespace']}/check_key",
            guard.service("check_key", self._on_check_key, check_key_failed),
            qos_profile=SERVICE_QOS,
            callback_group=api,
        )
        # Woken by work (submits, results, statuses), asleep until the next retry deadline:
        # no fixed tick (see dispatch_loop.py). Made before the robot links, whose
        # statuses kick it as soon as they arrive; started once they exist to send on.
        self._dispatch = DispatchLoop(
            self.core,
            self._send,
            counters=self.core.counters,
            on_error=self._dispatch_failed,
            hold_back=self._hold_back,
        )
        # Per-robot endpoints live apart from the API's services (see robot_links.py).
        self._links = RobotLinks(
            self.context,
            (spec.id for spec in fleet.robots),
            on_status=self._on_status,
            on_liveliness=self._on_liveliness,
            on_incompatible=self._on_status_incompatible,
            guard=guard,
            counters=self.core.counters,
            rng=self._rng,
            duplicate_probability=float(p["duplicate_delivery_probability"]),
        )
        self._dispatch.start()
        self._links.listen_to_results(guard.topic("results", self._on_result))
        # The same API as an action, on a side node of its own (action_server.py).
        self._actions = ExecuteCommandServer(
            self.context,
            self.core,
            name=f"{p['api_namespace']}/execute_command",
            kick=self._dispatch.kick,
            logger=self.get_logger(),
        )
        timers = MutuallyExclusiveCallbackGroup()
        self.create_timer(
            p["gc_period_s"], guard.timer("gc", self._collect_garbage), callback_group=timers
        )
        if self._keyring is not None:
            self.create_timer(
                p["auth_reload_period_s"],
                guard.timer("auth_reload", self._reload_keyring),
                callback_group=timers,
            )
        self._leases: ReplicaLeases | None = None
        if self._replica is not None:
            self._leases = ReplicaLeases(
                self.core,
                self._replica,
                [spec.id for spec in fleet.robots],
                on_change=self._dispatch.kick,
                log=self.get_logger().info,
            )
            self.create_timer(
                FOLLOW_PERIOD_S, guard.timer("follow_log", self._follow_log), callback_group=timers
            )
            self.create_timer(
                SWEEP_PERIOD_S, guard.timer("sweep", self._sweep), callback_group=timers
            )
            self._leases.start()
        # Last: clients re-send what they sent our predecessor as soon as they read this.
        self._boot_pub.publish(
            OrchestratorBoot(boot_id=uuid.uuid4().hex, started=self.get_clock().now().to_msg())
        )
        where = f"shared store {redacted_url(p['store_url'])}" if self._replica else f"store {root}"
        self.get_logger().info(
            f"orchestrating {len(fleet.robots)} robots; {where}; "
            f"restored {self.core.counters['restored']} in-flight commands; "
            f"API at {p['api_namespace']}/submit_command and {p['api_namespace']}/execute_command"
        )

    def _follow_log(self) -> None:
        if self.core.follow_log():
            self._dispatch.kick()

    def _sweep(self) -> None:
        if self.core.sweep():
            self._dispatch.kick()

    def _declare_parameters(self) -> dict[str, Any]:
        defaults: dict[str, Any] = {
            "fleet_file": "",
            "store_dir": str(Path.home() / ".ros" / "fleet_idempotency" / "orchestrator"),
            "retention_s": 86_400.0,
            "tombstone_retention_s": 7 * 86_400.0,
            "durable": True,
            "queue_capacity_per_robot": 256,
            # Re-sends and pacing: see OrchestratorSettings (orchestrator/dispatch.py).
            "retry_initial_s": 0.5,
            "retry_min_s": 0.1,
            "retry_max_s": 5.0,
            "retry_jitter": 0.2,
            "acknowledged_resend_s": 30.0,
            "unanswered_per_robot": 2,
            "offline_after_s": 30.0,
            "busy_pause_s": 0.5,
            "gc_period_s": 60.0,
            # Fault injection for tests and demos: deliver a fraction of commands twice.
            "duplicate_delivery_probability": 0.0,
            "reorder_delivery_probability": 0.0,
            "seed": 0,
            # The fleet keyring (auth/keyring.py): every command is signed with its active
            # key. Empty: commands go unsigned (robots without a keyring accept them).
            "auth_keyring": "",
            "auth_reload_period_s": 5.0,
            # Replicas: a postgresql:// URL shared by every replica (key store, event log,
            # leases). Empty: a lone orchestrator on LMDB under store_dir.
            "store_url": "",
            "replica_name": "orchestrator",
            "lease_ttl_s": 3.0,
            # Where the API's services live; each replica needs its own (two servers of one
            # service would both answer every request).
            "api_namespace": "/fleet",
        }
        return {
            name: self.declare_parameter(name, default).value for name, default in defaults.items()
        }

    def _reload_keyring(self) -> None:
        assert self._keyring is not None
        try:
            keyring = self._keyring.refresh()
        except (KeyringError, ValueError) as error:
            self.get_logger().error(f"{error}; keeping the keys in force")
            return
        if keyring is not None and keyring.active:
            self.core.signer = CommandSigner(keyring)
            self.get_logger().info(f"keyring reloaded: signing with {keyring.active!r}")

    # --- API --------------------------------------------------------------------------------
    def _on_submit(
        self, request: SubmitCommand.Request, response: SubmitCommand.Response
    ) -> SubmitCommand.Response:
        answer = self.core.submit(
            SubmitRequest(
                client_id=request.client_id,
                key=request.idempotency_key,
                robot_id=request.robot_id,
                command_type=request.command_type,
                payload_json=request.payload_json,
                wait_timeout_s=request.wait_timeout_sec,
            )
        )
        self._dispatch.kick()
        if request.wait_timeout_sec > 0 and answer.status_code in (202, CONFLICT):
            if not self._wait_slots.acquire(blocking=False):
                self.core.counters["waits_refused"] += 1
                answer = replace(
                    answer,
                    message=f"{answer.message}; not waited: {MAX_WAITING_SUBMITS} submits "
                    "are already waiting, poll CheckKey or re-submit for the result",
                )
                return _fill_submit_response(answer, response)
            try:
                final = self.core.final_answer(
                    request.client_id, request.idempotency_key, request.wait_timeout_sec
                )
            finally:
                self._wait_slots.release()
            if final is not None:
                answer = SubmitAnswer(
                    final.state,
                    final.status_code,
                    replayed=answer.status_code == CONFLICT,
                    result_json=final.result_json,
                    message=final.message,
                )
        return _fill_submit_response(answer, response)

    def _on_check_key(
        self, request: CheckKey.Request, response: CheckKey.Response
    ) -> CheckKey.Response:
        status, robot_query = self.core.check_key(request.client_id, request.idempotency_key)
        if robot_query is not None:
            status = self._ask_robot(status, *robot_query)
        return fill_check_key_response(status, response)

    def _ask_robot(self, ours: KeyStatus, robot_id: str, robot_key: str) -> KeyStatus:
        """Not final here: what does the robot itself say? (The reconciliation path.)"""
        theirs = ask_check_key(self._links.check_client(robot_id), robot_key, ROBOT_CHECK_TIMEOUT_S)
        if theirs is None:
            return _with_message(
                ours, f"{ours.message}; robot {robot_id} did not answer its status check (offline?)"
            )
        if not theirs.found:
            return _with_message(
                ours,
                f"{ours.message}; robot {robot_id} has not recorded it yet (queued or in transit)",
            )
        return KeyStatus(
            found=True,
            state=State(theirs.state),
            status_code=theirs.status_code,
            robot_id=robot_id,
            command_type=ours.command_type,
            payload_sha256=ours.payload_sha256,
            result_json=theirs.result_json,
            message=f"robot {robot_id} reports {State(theirs.state).name}"
            + (f": {theirs.message}" if theirs.message else ""),
            created_at=ours.created_at,
            expires_at=ours.expires_at,
        )

    # --- traffic ----------------------------------------------------------------------------
    def _send(self, deliveries: list[Delivery]) -> None:
        stamp = self.get_clock().now().to_msg()
        for delivery in deliveries:
            self._links.send(delivery, stamp)

    def _hold_back(self, _delivery: Delivery) -> bool:
        return bool(self._reorder_probability) and self._rng.random() < self._reorder_probability

    def _dispatch_failed(self, error: Exception) -> None:
        if not self.context.ok():
            # Shutting down: publishing fails until the loop is stopped; what was not
            # sent is re-sent from the store by the next start.
            return
        self.get_logger().error(
            f"dispatch: unexpected {error!r} (kept dispatching)", throttle_duration_sec=5.0
        )

    def _on_result(self, message: CommandResult) -> None:
        try:
            answer = answer_from_msg(message)
        except InvalidMessage:
            self.core.counters["results_invalid"] += 1
            return
        self.core.on_result(answer)
        self._dispatch.kick()

    def _on_status(self, message: RobotStatus, heard_on: str) -> None:
        # A heartbeat that changes nothing does not wake the dispatch thread.
        if self.core.on_status(
            message.robot_id,
            message.queue_depth,
            message.capacity,
            heard_on=heard_on,
            boot_id=message.boot_id,
            last_finished_key=message.last_finished_key,
            ready=message.ready,
        ):
            self._dispatch.kick()

    def _on_liveliness(self, robot_id: str, alive: bool) -> None:
        if self.core.on_liveliness(robot_id, alive):
            self._dispatch.kick()

    def _on_status_incompatible(self, robot_id: str, policy: str) -> None:
        self.get_logger().error(
            f"robot {robot_id}: its status publisher's QoS does not match ours ({policy}): "
            "its statuses cannot reach this orchestrator, so it will never be dispatched to. "
            "An agent older than this orchestrator offers no liveliness lease: upgrade the "
            "robots first (docs/design.md)",
            throttle_duration_sec=30.0,
        )

    def _publish_events(self, events: list[FleetEventRecord]) -> None:
        """One commit's events: as batches, and one by one only while anyone listens to
        /fleet/events (the package's own consumers take the batches)."""
        messages = [event_to_msg(event) for event in events]
        for batch in event_batches(messages):
            self._event_batches_pub.publish(batch)
        if self._events_pub.get_subscription_count() > 0:
            for message in messages:
                self._events_pub.publish(message)

    def _collect_garbage(self) -> None:
        self.store.gc(max_batches=4)

    def shutdown(self) -> None:
        self._actions.close()
        if self._leases is not None:
            self._leases.close()
        self._dispatch.stop()
        self._links.close()
        self.store.close()
        self.events.close()


def _with_message(status: KeyStatus, message: str) -> KeyStatus:
    return replace(status, message=message)


def _submit_failed(response: SubmitCommand.Response, message: str) -> SubmitCommand.Response:
    # Whether the submit was recorded is unknown: the client re-sends (the key makes that
    # safe) or asks CheckKey.
    response.state = int(State.UNKNOWN)
    response.status_code = INTERNAL
    response.replayed = False
    response.result_json = ""
    response.message = f"{message}; re-send the same request or use the status check"
    return response


def _fill_submit_response(
    answer: SubmitAnswer, response: SubmitCommand.Response
) -> SubmitCommand.Response:
    response.state = int(answer.state)
    response.status_code = answer.status_code
    response.replayed = answer.replayed
    response.result_json = answer.result_json
    response.message = answer.message
    return response


def main(args: list[str] | None = None) -> None:
    run_nodes("orchestrator", lambda: [Orchestrator()], threads=EXECUTOR_THREADS, args=args)


if __name__ == "__main__":
    main()
