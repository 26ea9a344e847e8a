"""The ``vda5050`` backend: the agent driver as master control of one VDA 5050 vehicle.

Life of a command (docs/design.md, "VDA 5050"):

- ``prepare`` (the key is already claimed, durably): refuses before anything is sent
  when the vehicle is not ONLINE on ``connection``, has no ``state`` yet, is not idle, or
  lacks the action in its ``factsheet``; else it encodes the order once, publishes it, and
  re-publishes those same bytes every ``resend_period_s`` until ``state`` shows the order
  (QoS 0 loses messages). A refusal the vehicle reports before taking the order over
  (``orderUpdateError``, OTHER_ORDER_ACTIVE, ``validationError``, ...) is a CommandRefused:
  the key is released. Re-sending stops for good once the vehicle reports another order
  than the one it had when we first published, or restarted: then nobody can say whether
  ours ran, and ``execute`` reports it INTERRUPTED (OutcomeUnknown), never re-sending.
- ``execute`` watches ``state``: COMPLETED, FAILED, or INTERRUPTED when the vehicle no
  longer knows the order it had shown (it restarted and forgot).
- ``reconcile`` (after an agent crash) asks ``state`` only, and never publishes.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, ClassVar

from pydantic import BaseModel

from fleet_idempotency.commands import DOCK, ROBOT_CAPABILITIES
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.backend import (
    BackendContext,
    Command,
    CommandRefused,
    ExecutionAborted,
    ExecutionFailed,
    OutcomeUnknown,
    Readiness,
    RobotBackend,
)
from fleet_idempotency.robots.targets import refuse_unsupported, resolve_target, result_body
from fleet_idempotency.robots.vda5050.orders import Header, OrderPlan, build_order, plan_for
from fleet_idempotency.robots.vda5050.params import Vda5050Params
from fleet_idempotency.robots.vda5050.vehicle_view import Snapshot, VehicleView
from fleet_idempotency.robots.vda5050.verdict import Phase, Verdict, judge
from fleet_idempotency.vda5050.mqtt import MqttLink
from fleet_idempotency.vda5050.wire import QOS, HeaderIds, topic

NOT_READY, BUSY, INVALID = 503, 429, 400
# Refusals of an order because the vehicle is busy: retryable, like the agent's own 429.
BUSY_ERROR_TYPES = frozenset({"OTHER_ORDER_ACTIVE", "MOBILE_ROBOT_NOT_AVAILABLE"})
WAIT_SLICE_S = 0.25


class _Watch:
    """One published order: its bytes and what the vehicle showed when it was sent."""

    def __init__(self, plan: OrderPlan, message: bytes, before: Snapshot) -> None:
        self.plan = plan
        self.message = message
        self.prior_order_id = before.state.orderId if before.state is not None else ""
        self.restarts = before.restarts
        self.seen = False
        self.last_sent = 0.0
        # A refusal of an earlier attempt of this key stays in ``state`` until the vehicle
        # accepts a new order (2.1 section 6.6.4): it counts only if it is still there
        # after the vehicle published two states since our first publish.
        before_verdict = judge(before.state, plan)
        self.old_refusal = before_verdict.message if before_verdict.phase is Phase.REFUSED else ""
        self.sequence_at_send = -1
        self.unknown = ""  # why the outcome cannot be known any more


class Vda5050Backend(RobotBackend):
    """A VDA 5050 vehicle (AGV, forklift) behind an MQTT broker (backend ``vda5050``)."""

    interface_version = 1
    Params: ClassVar[type[BaseModel]] = Vda5050Params
    robot_types: ClassVar[frozenset[str] | None] = frozenset({"amr", "forklift"})
    reconciles_after_crash: ClassVar[bool] = True

    def __init__(self, context: BackendContext, params: BaseModel) -> None:
        super().__init__(context, params)
        assert isinstance(params, Vda5050Params)
        self.p = params
        self.layout = params.world_layout()
        self._stop = threading.Event()
        self._watches: dict[str, _Watch] = {}
        self._headers = HeaderIds()
        self._topics = {
            name: topic(
                params.interface_name,
                params.major_version,
                params.manufacturer,
                params.serial_number,
                name,
            )
            for name in ("order", "instantActions", "state", "connection", "factsheet")
        }
        self.view = VehicleView(
            manufacturer=params.manufacturer,
            serial_number=params.serial_number,
            max_bytes=params.max_message_bytes,
            max_depth=params.max_json_depth,
            on_change=self._maybe_ready_changed,
        )
        by_topic = {v: k for k, v in self._topics.items()}
        self.link = MqttLink(
            params,
            f"fleet-idem-{context.robot_id}-master",
            on_message=lambda t, payload: self._receive(by_topic.get(t, t), payload),
            on_connect=self._maybe_ready_changed,
            on_disconnect=self._maybe_ready_changed,
        )
        for name in ("state", "connection", "factsheet"):
            self.link.subscribe(self._topics[name], QOS[name])
        self._was_ready = False
        self._header = Header(params.protocol_version, params.manufacturer, params.serial_number)

    def _receive(self, topic_name: str, payload: bytes) -> None:
        self.view.receive(topic_name, payload)

    # --- readiness --------------------------------------------------------------------------
    def start(self) -> None:
        self.link.start()

    def readiness(self) -> Readiness:
        if not self.link.connected:
            where = f"{self.p.broker_host}:{self.p.broker_port}"
            return Readiness(False, f"the MQTT broker at {where}")
        snapshot = self.view.snapshot()
        name = self.p.serial_number
        if snapshot.connection != "ONLINE":
            return Readiness(False, f"VDA 5050 vehicle {name} to come ONLINE")
        if snapshot.state is None or snapshot.state_stale:
            return Readiness(False, f"the state of VDA 5050 vehicle {name}")
        return Readiness(True)

    def _maybe_ready_changed(self) -> None:
        ready = self.readiness().ready
        if ready != self._was_ready:
            self._was_ready = ready
            self.context.on_ready_change()

    # --- RobotBackend -----------------------------------------------------------------------
    def supported_commands(self) -> frozenset[str]:
        return ROBOT_CAPABILITIES[self.robot_type]

    def pose(self) -> Pose:
        state = self.view.snapshot().state
        if state is None or state.agvPosition is None:
            return self.context.start_pose
        position = state.agvPosition
        return Pose(x=position.x, y=position.y, theta=position.theta)

    def prepare(self, command: Command) -> None:
        refuse_unsupported(self.robot_type, command.command_type)
        target = resolve_target(
            self.layout,
            command.payload,
            robot_type=self.robot_type,
            reach_m=math.inf,
            mobile=True,
            pose=self.pose(),
        )
        snapshot = self.view.snapshot()
        name = self.p.serial_number
        if not self.link.connected:
            raise CommandRefused(f"{self.robot_id}: no connection to the MQTT broker", NOT_READY)
        if snapshot.connection != "ONLINE":
            raise CommandRefused(
                f"{self.robot_id}: vehicle {name} is not ONLINE "
                f"(connection: {snapshot.connection or 'never heard'})",
                NOT_READY,
            )
        state = snapshot.state
        if state is None:
            raise CommandRefused(f"{self.robot_id}: no state from vehicle {name} yet", NOT_READY)
        if snapshot.state_stale:
            # A state published after this ONLINE tells whether the vehicle restarted; an
            # order sent before it would be taken for one the restart made it forget.
            raise CommandRefused(
                f"{self.robot_id}: vehicle {name} came ONLINE and has sent no state since",
                NOT_READY,
            )
        if not state.idle():
            raise CommandRefused(
                f"{self.robot_id}: vehicle {name} is busy with order {state.orderId!r}", BUSY
            )
        if snapshot.factsheet is None:
            raise CommandRefused(f"{self.robot_id}: no factsheet from vehicle {name}", NOT_READY)
        offered = snapshot.factsheet.node_actions()
        dock_action = None
        if command.command_type == DOCK:
            dock_action = next((a for a in self.p.dock_action_types if a in offered), None)
            if dock_action is None:
                raise CommandRefused(
                    f"vehicle {name} offers no docking action on nodes "
                    f"(looked for {', '.join(self.p.dock_action_types)})",
                    INVALID,
                )
        plan = plan_for(command, dock_action)
        if plan.action_type is not None and plan.action_type not in offered:
            raise CommandRefused(
                f"vehicle {name} cannot {plan.action_type!r} (its factsheet offers: "
                f"{', '.join(sorted(offered)) or 'no node actions'})",
                INVALID,
            )
        here = self.pose()
        message = build_order(
            plan,
            target,
            here=here,
            header_id=self._headers.next("order"),
            header=self._header,
            map_id=self.p.map_id,
            deviation_xy=self.p.allowed_deviation_xy,
        )
        watch = _Watch(plan, message, snapshot)
        # The claim is durable (the agent claimed the key before prepare): publish now.
        verdict = self._until_shown(watch)
        if verdict.phase is Phase.REFUSED:
            busy = verdict.error_type in BUSY_ERROR_TYPES or "OTHER_ORDER_ACTIVE" in verdict.message
            code = BUSY if busy else INVALID
            raise CommandRefused(f"vehicle {name} refused the order: {verdict.message}", code)
        self._watches[command.key] = watch

    def execute(self, command: Command) -> dict[str, Any]:
        watch = self._watches.pop(command.key, None)
        if watch is None:  # prepare always leaves one; a resumed command never comes here
            raise OutcomeUnknown(f"no order was published for {command.key!r}")
        return self._until_final(command, watch)

    def reconcile(self, command: Command) -> dict[str, Any]:
        """Ask the vehicle's ``state`` (a fresh one); never publish anything."""
        plan = plan_for(command, self._dock_action_of(command))
        started = self.view.snapshot().state_sequence
        # A state received after this process started: readiness already waited for one.
        self._wait(lambda s: s.state_sequence >= max(started, 1), "the vehicle's state")
        snapshot = self.view.snapshot()
        verdict = judge(snapshot.state, plan)
        if verdict.phase in (Phase.NOT_CURRENT, Phase.REFUSED):
            current = snapshot.state.orderId if snapshot.state is not None else ""
            raise OutcomeUnknown(
                f"vehicle {self.p.serial_number} does not report order {plan.order_id!r} "
                f"(its order: {current!r}); whether it ran is unknown"
            )
        watch = _Watch(plan, b"", snapshot)
        watch.seen = True  # never re-sent
        return self._until_final(command, watch)

    def shutdown(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self.view.wake()
        self.link.stop()

    # --- watching the vehicle ---------------------------------------------------------------
    def _dock_action_of(self, command: Command) -> str | None:
        if command.command_type != DOCK:
            return None
        factsheet = self.view.snapshot().factsheet
        offered = factsheet.node_actions() if factsheet is not None else frozenset()
        return (
            next((a for a in self.p.dock_action_types if a in offered), None)
            or (self.p.dock_action_types[0])
        )

    def _wait(self, condition: Any, what: str) -> None:
        while not self.view.wait_for(condition, WAIT_SLICE_S):
            if self._stop.is_set():
                raise ExecutionAborted(f"{self.robot_id}: stopped while waiting for {what}")

    def _step(self, watch: _Watch) -> Verdict:
        """Judge the latest state; re-send while the order may still be sent safely."""
        snapshot = self.view.snapshot()
        verdict = judge(snapshot.state, watch.plan)
        if verdict.phase in (Phase.RUNNING, Phase.COMPLETED, Phase.FAILED):
            watch.seen = True
            return verdict
        if verdict.phase is Phase.REFUSED:
            if not (
                verdict.message == watch.old_refusal
                and (
                    watch.sequence_at_send < 0
                    or snapshot.state_sequence < watch.sequence_at_send + 2
                )
            ):
                return verdict
            verdict = Verdict(Phase.NOT_CURRENT)  # an earlier attempt's refusal, so far
        if watch.unknown:
            return verdict
        current = snapshot.state.orderId if snapshot.state is not None else ""
        if watch.seen:
            watch.unknown = (
                f"vehicle {self.p.serial_number} no longer reports order "
                f"{watch.plan.order_id!r} (now {current!r}): it restarted or dropped it"
            )
        elif snapshot.restarts != watch.restarts:
            watch.unknown = f"vehicle {self.p.serial_number} restarted before showing the order"
        elif current != watch.prior_order_id:
            watch.unknown = f"vehicle {self.p.serial_number} took another order ({current!r})"
        elif (
            self._resend_due(watch)
            and snapshot.connection == "ONLINE"
            and self.link.publish(self._topics["order"], watch.message, qos=QOS["order"])
        ):
            watch.last_sent = time.monotonic()
            if watch.sequence_at_send < 0:
                watch.sequence_at_send = snapshot.state_sequence
        return verdict

    def _resend_due(self, watch: _Watch) -> bool:
        return bool(watch.message) and (
            time.monotonic() - watch.last_sent >= self.p.resend_period_s
        )

    def _until_shown(self, watch: _Watch) -> Verdict:
        while True:
            verdict = self._step(watch)
            if watch.seen or watch.unknown or verdict.phase is Phase.REFUSED:
                return verdict
            if self._stop.is_set():
                raise ExecutionAborted(f"{self.robot_id}: stopped before the vehicle answered")
            self.view.wait_change(min(WAIT_SLICE_S, self.p.resend_period_s))

    def _until_final(self, command: Command, watch: _Watch) -> dict[str, Any]:
        while True:
            verdict = self._step(watch)
            if verdict.phase is Phase.COMPLETED:
                return self._result(command, watch)
            if verdict.phase is Phase.FAILED:
                raise ExecutionFailed(f"vehicle {self.p.serial_number}: {verdict.message}")
            if verdict.phase is Phase.REFUSED and not watch.seen:
                # Refused after prepare handed over (the state showing it was lost): the
                # vehicle kept its previous order, but execute's outcome is final.
                raise ExecutionFailed(f"vehicle {self.p.serial_number}: {verdict.message}", 409)
            if watch.unknown:
                raise OutcomeUnknown(watch.unknown)
            if self._stop.is_set():
                raise ExecutionAborted(f"{self.robot_id}: stopped while the vehicle runs it")
            self.view.wait_change(min(WAIT_SLICE_S, self.p.resend_period_s))

    def _result(self, command: Command, watch: _Watch) -> dict[str, Any]:
        state = self.view.snapshot().state
        extra: dict[str, Any] = {
            "vehicle": self.p.serial_number,
            "order_id": watch.plan.order_id,
        }
        for action_id in watch.plan.action_ids:
            action = state.action(action_id) if state is not None else None
            if action is not None and action.resultDescription:
                extra["action_result"] = action.resultDescription
                if watch.plan.action_type in {"pick", "drop"}:
                    extra["item"] = action.resultDescription
        return result_body(self.robot_id, command, watch.plan.target, self.pose(), **extra)
