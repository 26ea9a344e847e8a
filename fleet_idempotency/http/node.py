"""HTTP API node: uvicorn serving ``app.py`` in front of the fleet's public ROS interfaces.

Calls ``/fleet/submit_command`` (SubmitCommand) and ``/fleet/check_key`` (CheckKey) of
the orchestrator, ``/world/state`` (GetWorldState) of the simulator; follows
``/fleet/event_batches``, ``/fleet/results``, ``/fleet/<robot>/status`` and ``/diagnostics``.
Depends on nothing else of the orchestrator, so either can be restarted or reworked alone.

    ros2 run fleet_idempotency http_api --ros-args -p port:=8080

A request without an answer is re-sent with the same key (safe: the orchestrator answers
a re-sent submit from its store) until ``wait + answer_timeout_s``; then the HTTP caller
gets 503 with Retry-After and retries itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import sys
import threading
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import rclpy
import uvicorn
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.description.resources import default_fleet_file
from fleet_idempotency.msg import (
    CommandResult,
    FleetEvent,
    FleetEventBatch,
    OrchestratorBoot,
    RobotStatus,
)
from fleet_idempotency.ros import stop_signals
from fleet_idempotency.ros.convert import MAX_EVENTS_PER_BATCH, time_to_epoch
from fleet_idempotency.ros.guard import CallbackGuard
from fleet_idempotency.ros.node_main import STARTUP_ERRORS
from fleet_idempotency.ros.orchestrator_boots import OrchestratorBoots
from fleet_idempotency.ros.parent_watch import arm_shutdown_deadline, watch_parent
from fleet_idempotency.ros.qos import (
    BOOT_QOS,
    RELIABLE_TOPIC_QOS,
    SERVICE_QOS,
    STATUS_QOS,
    drop_default_event_handlers,
)
from fleet_idempotency.ros.side_thread import start_serving_thread
from fleet_idempotency.ros.teardown_backstop import participant_teardown_backstop
from fleet_idempotency.srv import CheckKey, GetWorldState, SubmitCommand
from fleet_idempotency.store.errors import InvalidRequest
from fleet_idempotency.store.fingerprint import parse_json

from .answers import STATE_NAMES
from .app import HttpSettings, create_app
from .auth import ApiKeyError, load_api_keys
from .gateway import KeyReport, SubmitCall, SubmitReply, Unavailable
from .metrics import HttpMetrics
from .view import FleetView, RobotView

# A robot's "waiting for" as shown over HTTP: a sentence, not an unbounded string.
MAX_WAITING_FOR = 200

LOOPBACK = "127.0.0.1"
# The orchestrator's services and boot messages (this node talks to the primary one).
API_NAMESPACE = "/fleet"
# The first send after discovery is sometimes lost with its reply: re-send soon.
FIRST_RESEND_S = 1.0
RESEND_S = 3.0


class HttpApiNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("http_api", **kwargs)
        p = self._declare_parameters()
        fleet = load_fleet(Path(p["fleet_file"] or default_fleet_file()))
        self.settings = HttpSettings(
            max_body_bytes=p["max_body_bytes"],
            max_in_flight_per_client=p["max_in_flight_per_client"],
            max_wait_s=p["max_wait_s"],
            answer_timeout_s=p["answer_timeout_s"],
            retry_after_s=p["retry_after_s"],
        )
        self.api_keys = load_api_keys(p["api_keys_file"] or None)
        self.host = str(p["host"] or fleet.http.host)
        self.port = int(p["port"] if p["port"] >= 0 else fleet.http.port)
        if not self.api_keys.enabled and self.host != LOOPBACK:
            self.get_logger().warning(
                f"no API key configured: binding to {LOOPBACK} only, not {self.host}"
            )
            self.host = LOOPBACK
        self.metrics = HttpMetrics()
        self.view = FleetView(
            [
                RobotView(r.id, r.type, r.start.x, r.start.y, r.start.theta, capacity=r.capacity)
                for r in fleet.robots
            ],
            self.metrics,
            ring_size=p["event_ring_size"],
            offline_after_s=fleet.orchestrator.offline_after_s,
        )
        # The service clients live on a side node with an executor of its own: an answer
        # is then handled without queueing behind the topic traffic (events, statuses)
        # that this node's executor works through (see bench/bench_http.py).
        self.calls = rclpy.create_node("http_api_calls", context=self.context)
        self._submit = self.calls.create_client(
            SubmitCommand, f"{API_NAMESPACE}/submit_command", qos_profile=SERVICE_QOS
        )
        self._check = self.calls.create_client(
            CheckKey, f"{API_NAMESPACE}/check_key", qos_profile=SERVICE_QOS
        )
        self._world = self.calls.create_client(
            GetWorldState, "/world/state", qos_profile=SERVICE_QOS
        )
        self.counters: Counter[str] = Counter()
        guard = CallbackGuard(
            self.get_logger(), self.counters, shutting_down=lambda: not self.context.ok()
        )
        # The orchestrator process serving now (OrchestratorBoot.msg): a request sent to
        # one that has since been replaced is re-sent at once, not after its patience.
        self._boots = OrchestratorBoots()
        self.calls.create_subscription(
            OrchestratorBoot, f"{API_NAMESPACE}/boot", guard.topic("boot", self._on_boot), BOOT_QOS
        )
        self.create_subscription(
            FleetEventBatch,
            "/fleet/event_batches",
            guard.topic("events", self._on_event_batch),
            RELIABLE_TOPIC_QOS,
        )
        self.create_subscription(
            CommandResult,
            "/fleet/results",
            guard.topic("results", self._on_result),
            RELIABLE_TOPIC_QOS,
        )
        for robot in fleet.robots:
            self.create_subscription(
                RobotStatus,
                f"/fleet/{robot.id}/status",
                guard.topic("status", functools.partial(self._on_status, robot.id)),
                STATUS_QOS,
            )
        self.create_subscription(
            DiagnosticArray, "/diagnostics", guard.topic("diagnostics", self._on_diagnostics), 10
        )
        # No QoS event handlers: this node wakes for every result, event batch, status and
        # diagnostic, and its executor walks each handler on every wake-up (~40 of them:
        # a fifth of this process's CPU per command under the demo's load).
        drop_default_event_handlers(self)
        drop_default_event_handlers(self.calls)
        self.app = create_app(
            gateway=self,
            view=self.view,
            metrics=self.metrics,
            api_keys=self.api_keys,
            world=fleet.world,
            settings=self.settings,
        )

    def _declare_parameters(self) -> dict[str, Any]:
        defaults: dict[str, Any] = {
            "fleet_file": "",
            "host": "",  # "" : the fleet file's http.host
            "port": -1,  # -1: the fleet file's http.port
            "api_keys_file": "",
            "max_body_bytes": 16_384,
            "max_in_flight_per_client": 32,
            "max_wait_s": 60.0,
            "answer_timeout_s": 5.0,
            "retry_after_s": 1,
            "event_ring_size": 10_000,
        }
        return {
            name: self.declare_parameter(name, default).value for name, default in defaults.items()
        }

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    # --- topics -----------------------------------------------------------------------------
    def _on_event_batch(self, batch: FleetEventBatch) -> None:
        # Anyone may publish on the topic: no more than the orchestrator ever sends at once.
        excess = len(batch.events) - MAX_EVENTS_PER_BATCH
        if excess > 0:
            self.counters["events_beyond_batch_bound"] += excess
        for message in batch.events[:MAX_EVENTS_PER_BATCH]:
            self._on_event(message)

    def _on_event(self, message: FleetEvent) -> None:
        try:
            # Bounded like every JSON this package reads: anyone may publish on the topic.
            detail = parse_json("detail_json", message.detail_json) if message.detail_json else {}
        except InvalidRequest:
            detail = {"raw": message.detail_json[:1000]}
        self.view.add_event(
            {
                "sequence": int(message.sequence),
                "event_type": message.event_type,
                "idempotency_key": message.idempotency_key,
                "client_id": message.client_id,
                "robot_id": message.robot_id,
                "detail": detail,
                "stamp": time_to_epoch(message.stamp),
            }
        )

    def _on_result(self, message: CommandResult) -> None:
        self.metrics.results.labels(STATE_NAMES.get(message.state, str(message.state))).inc()

    def _on_status(self, heard_on: str, message: RobotStatus) -> None:
        # Only the robot its topic names, with a pose that can be drawn: a forged status
        # must neither add robots to the view (memory) nor put NaN into its JSON.
        pose = (message.x, message.y, message.theta)
        if message.robot_id != heard_on or not all(math.isfinite(v) for v in pose):
            self.counters["status_refused"] += 1
            return
        self.view.update_robot(
            {
                "robot_id": message.robot_id,
                "robot_type": message.robot_type,
                "x": message.x,
                "y": message.y,
                "theta": message.theta,
                "queue_depth": int(message.queue_depth),
                "capacity": int(message.capacity),
                "busy": bool(message.busy),
                "current_key": message.current_key,
                "ready": bool(message.ready),
                "waiting_for": message.waiting_for[:MAX_WAITING_FOR],
            }
        )

    def _on_diagnostics(self, message: DiagnosticArray) -> None:
        for status in message.status:
            if status.name.endswith(": idempotency store"):
                for pair in status.values:
                    if pair.key == "records" and pair.value.isdigit():
                        self.metrics.store_records.labels(status.hardware_id).set(int(pair.value))

    # --- FleetGateway -----------------------------------------------------------------------
    def ready(self) -> bool:
        return bool(self._submit.service_is_ready() and self._check.service_is_ready())

    def _on_boot(self, message: OrchestratorBoot) -> None:
        self._boots.heard(API_NAMESPACE, message.boot_id)

    async def _call(
        self, client: Any, request: Any, *, deadline_s: float, wait_s: float = 0.0
    ) -> Any:
        """Send; re-send when no answer came ``wait_s`` + patience later, or at once when
        the orchestrator process it went to is replaced; give up at ``deadline_s``. The
        server may hold a request for ``wait_s`` by design."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        # (future, replacements of the orchestrator when sent; None: the world's service,
        # which has no boot id)
        sends: list[tuple[Any, int | None]] = []
        follows_boot = client is not self._world
        give_up = loop.time() + deadline_s

        def replacements() -> int:
            return self._boots.replacements(API_NAMESPACE)

        def lost() -> int:
            return sum(seen is not None and seen < replacements() for _future, seen in sends)

        wake_soon = functools.partial(loop.call_soon_threadsafe, wake.set)  # any thread
        try:
            with self._boots.waking(wake_soon):
                while True:
                    remaining = give_up - loop.time()
                    if remaining <= 0:
                        raise Unavailable(
                            f"no answer from {client.srv_name} within {deadline_s:g} s "
                            f"({len(sends)} sends); retry with the same key"
                        )
                    if not client.service_is_ready():
                        await asyncio.sleep(min(0.1, remaining))
                        continue
                    future = client.call_async(request)
                    future.add_done_callback(lambda _f: wake_soon())
                    sends.append((future, replacements() if follows_boot else None))
                    first = (len(sends) - lost()) == 1  # the first send to this process
                    patience = wait_s + (FIRST_RESEND_S if first else RESEND_S)
                    until = loop.time() + min(patience, remaining)
                    lost_before = lost()
                    while True:
                        try:
                            await asyncio.wait_for(wake.wait(), max(0.0, until - loop.time()))
                        except TimeoutError:
                            break
                        wake.clear()
                        answered = [f for f, _seen in sends if f.done()]
                        if answered:
                            return answered[0].result()
                        if lost() > lost_before:
                            break
        finally:
            for future, _seen in sends:
                if not future.done():
                    client.remove_pending_request(future)

    async def submit(self, call: SubmitCall) -> SubmitReply:
        request = SubmitCommand.Request(
            client_id=call.client_id,
            idempotency_key=call.key,
            robot_id=call.robot_id,
            command_type=call.command_type,
            payload_json=call.payload_json,
            wait_timeout_sec=float(call.wait_timeout_s),
        )
        response = await self._call(
            self._submit,
            request,
            deadline_s=call.wait_timeout_s + self.settings.answer_timeout_s,
            wait_s=call.wait_timeout_s,
        )
        return SubmitReply(
            state=int(response.state),
            status_code=int(response.status_code),
            replayed=bool(response.replayed),
            result_json=response.result_json,
            message=response.message,
        )

    async def check(self, client_id: str, key: str) -> KeyReport:
        request = CheckKey.Request(client_id=client_id, idempotency_key=key)
        response = await self._call(self._check, request, deadline_s=self.settings.answer_timeout_s)
        return KeyReport(
            found=bool(response.found),
            state=int(response.state),
            status_code=int(response.status_code),
            robot_id=response.robot_id,
            command_type=response.command_type,
            payload_sha256=response.payload_sha256,
            result_json=response.result_json,
            message=response.message,
            created_at=time_to_epoch(response.created_at),
            expires_at=time_to_epoch(response.expires_at),
        )

    async def world(self) -> tuple[dict[str, Any], dict[str, Any]]:
        response = await self._call(self._world, GetWorldState.Request(), deadline_s=2.0)
        geometry: dict[str, Any] = json.loads(response.geometry_json)
        state: dict[str, Any] = json.loads(response.state_json)
        return geometry, state

    # --- serving ----------------------------------------------------------------------------
    def serve(self, stops: stop_signals.StopSignals) -> None:
        """Run uvicorn in this (the main) thread until a stop signal."""
        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            log_level="warning",
            access_log=False,
            # Open event streams never end by themselves: do not wait for them forever.
            timeout_graceful_shutdown=2,
        )
        server = QuietServer(config)
        auth = (
            f"API keys for {', '.join(self.api_keys.clients())}"
            if self.api_keys.enabled
            else "no API key configured (localhost only, every caller is client 'local')"
        )
        # Printed, not only logged: `fleet-idem up` and people read it.
        print(f"http_api: serving {self.url} (page), {self.url}docs (API); {auth}", flush=True)
        stops.on_stop(server.request_exit)
        server.run()


class QuietServer(uvicorn.Server):
    """uvicorn, stopped only through ``request_exit``: always the graceful way.

    uvicorn's own signal handling turns a second SIGINT into a forced exit, which skips
    the lifespan's shutdown and leaves starlette to log a CancelledError traceback; under
    ``ros2 launch`` every Ctrl-C is a second SIGINT (the terminal's, then launch's). It
    also re-raised the caught signal once done, into whatever handler was there before.
    The process's stop signals are ``stop_signals``' alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    def request_exit(self) -> None:
        # Read by uvicorn's main loop (every 0.1 s) and its start-up: no lock needed.
        self.should_exit = True


def main(args: list[str] | None = None) -> None:
    # A stop ends uvicorn (QuietServer.request_exit); the ROS side is shut down after it,
    # once no request can still be using it.
    stops = stop_signals.install()  # already done by the executable's entry point
    if stops.received.is_set():
        return
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    watch_parent()  # under fleet-idem: exit with it, however it dies
    node: HttpApiNode | None = None
    executors = [SingleThreadedExecutor(), SingleThreadedExecutor()]
    spinners: list[threading.Thread] = []
    try:
        try:
            node = HttpApiNode()
        except (*STARTUP_ERRORS, ApiKeyError) as error:
            print(f"http_api: cannot start: {error}", file=sys.stderr)
            raise SystemExit(1) from None
        if stops.received.is_set():
            return  # stopped while starting
        executors[0].add_node(node)
        executors[1].add_node(node.calls)
        for index, executor in enumerate(executors):
            spinners.append(start_serving_thread(executor, f"ros-{index}"))
        node.serve(stops)
    finally:
        arm_shutdown_deadline()
        for executor in executors:
            executor.shutdown(timeout_sec=2.0)
        for spinner in spinners:
            spinner.join(timeout=5.0)
        if node is not None:
            with participant_teardown_backstop("http_api"):
                node.calls.destroy_node()
                node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
