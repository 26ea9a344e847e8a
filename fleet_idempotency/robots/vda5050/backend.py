"""The ``vda5050`` backend: the agent driver as master control of one VDA 5050 vehicle.

Life of a command (docs/design.md, "VDA 5050"):

- It asks for what it needs: a ``stateRequest`` (and a ``factsheetRequest`` while it has no
  factsheet) when it connects to the broker, both when the vehicle's ``connection`` goes
  ONLINE (again), each repeated every ``request_period_s`` until answered. It is ready once
  the vehicle is ONLINE (or, where the broker kept no ``connection``, has sent a state) and
  it holds a state and a factsheet; its readiness says which one it waits for.
- ``prepare`` (the key is already claimed, durably): refuses before anything is sent
  when the vehicle is not ONLINE on ``connection``, has no ``state`` yet, is not idle, or
  lacks the action in its ``factsheet``; else it publishes the order, and re-publishes the
  same order (a new headerId each time) every ``resend_period_s`` until ``state`` shows it
  (QoS 0 loses messages). A refusal the vehicle reports before taking the order over
  (``orderUpdateError``, OTHER_ORDER_ACTIVE, ``validationError``, ...) is a CommandRefused:
  the key is released. Re-sending stops for good once the vehicle reports another order
  than the one it had when we first published, or restarted: then nobody can say whether
  ours ran, and ``execute`` reports it INTERRUPTED (OutcomeUnknown), never re-sending.
- ``execute`` watches ``state`` (``verdict.judge``): COMPLETED only at the target node,
  FAILED when an action failed or the order ended elsewhere (cancelled at the vehicle), or
  INTERRUPTED when the vehicle no longer knows the order it had shown (it restarted and
  forgot), each with the vehicle's reason.
- ``reconcile`` (after an agent crash) asks ``state`` only, and never publishes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
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
from fleet_idempotency.robots.vda5050.orders import (
    Header,
    OrderPlan,
    build_order,
    instant_actions,
    plan_for,
)
from fleet_idempotency.robots.vda5050.params import Vda5050Params
from fleet_idempotency.robots.vda5050.vehicle_view import Snapshot, VehicleView
from fleet_idempotency.robots.vda5050.verdict import Phase, Verdict, judge
from fleet_idempotency.vda5050.mqtt import MqttLink
from fleet_idempotency.vda5050.wire import QOS, HeaderIds, topic

NOT_READY, BUSY, INVALID, NO_ANSWER = 503, 429, 400, 504
# Refusals of an order because the vehicle is busy: retryable, like the agent's own 429.
BUSY_ERROR_TYPES = frozenset({"OTHER_ORDER_ACTIVE", "MOBILE_ROBOT_NOT_AVAILABLE"})
WAIT_SLICE_S = 0.25


class _Watch:
    """One published order: how to encode it (under a new headerId per send) and what the
    vehicle showed when it was first sent."""

    def __init__(
        self, plan: OrderPlan, encode: Callable[[], bytes] | None, before: Snapshot
    ) -> None:
        self.plan = plan
        self.encode = encode  # None: never sent by this process (a reconciled command)
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
        # Kept across restarts: the vehicle sees each topic's headerId go up by one, always.
        self._headers = HeaderIds(
            None if context.state_dir is None else context.state_dir / "vda5050_header_ids.json"
        )
        self._requests = _Requests()
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
            on_connect=self._connected,
            on_disconnect=self._maybe_ready_changed,
        )
        for name in ("state", "connection", "factsheet"):
            self.link.subscribe(self._topics[name], QOS[name])
        self._was_ready = False
        self._header = Header(params.protocol_version, params.manufacturer, params.serial_number)

    def _receive(self, topic_name: str, payload: bytes) -> None:
        before = self.view.snapshot().connection
        self.view.receive(topic_name, payload)
        if topic_name == "connection" and before != "ONLINE" == self.view.snapshot().connection:
            # Back (or new): its state may have changed, its factsheet too (a restart).
            self._requests.want(state=True, factsheet=True, view=self.view.snapshot())

    def _connected(self) -> None:
        """A (re)connection to the broker: what the vehicle did meanwhile is unknown, and a
        broker that kept no retained message will not tell us its factsheet."""
        snapshot = self.view.snapshot()
        self._requests.want(state=True, factsheet=snapshot.factsheet is None, view=snapshot)
        self._maybe_ready_changed()

    # --- readiness --------------------------------------------------------------------------
    def start(self) -> None:
        self.link.start()
        threading.Thread(
            target=self._ask_loop, name=f"{self.robot_id}-requests", daemon=True
        ).start()

    def readiness(self) -> Readiness:
        if not self.link.connected:
            where = f"{self.p.broker_host}:{self.p.broker_port}"
            return Readiness(False, f"the MQTT broker at {where}")
        snapshot = self.view.snapshot()
        name = self.p.serial_number
        if not _online(snapshot):
            return Readiness(
                False,
                f"VDA 5050 vehicle {name} to come ONLINE "
                f"(connection: {snapshot.connection or 'never heard'})",
            )
        if snapshot.state is None or snapshot.state_stale:
            return Readiness(False, f"the state of VDA 5050 vehicle {name} (asked: stateRequest)")
        if snapshot.factsheet is None:
            return Readiness(
                False, f"the factsheet of VDA 5050 vehicle {name} (asked: factsheetRequest)"
            )
        return Readiness(True)

    def _ask_loop(self) -> None:
        """Ask for what is wanted and not received, now and every ``request_period_s``."""
        while not self._stop.is_set():
            self._requests.wake.wait(self.p.request_period_s)
            self._requests.wake.clear()
            if self._stop.is_set() or not self.link.connected:
                continue
            snapshot = self.view.snapshot()
            if snapshot.connection not in ("", "ONLINE"):
                continue  # not connected: it would not hear us; its ONLINE brings a new ask
            wanted = self._requests.missing(snapshot)
            if not wanted:
                continue
            header_id = self._headers.next("instantActions")
            actions = [(f"fleet-idem/{header_id}/{kind}", kind) for kind in wanted]
            message = instant_actions(actions, header_id=header_id, header=self._header)
            self.link.publish(self._topics["instantActions"], message, qos=QOS["instantActions"])

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
        position = state.position() if state is not None else None
        if position is None:
            return self.context.start_pose
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
        if not _online(snapshot):
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
            raise CommandRefused(
                f"{self.robot_id}: no factsheet from vehicle {name} yet (asked: factsheetRequest)",
                NOT_READY,
            )
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
        plan = plan_for(command, dock_action, target, self.p.allowed_deviation_xy)
        if plan.action_type is not None and plan.action_type not in offered:
            raise CommandRefused(
                f"vehicle {name} cannot {plan.action_type!r} (its factsheet offers: "
                f"{', '.join(sorted(offered)) or 'no node actions'})",
                INVALID,
            )
        here = self.pose()

        def encode() -> bytes:
            return build_order(
                plan,
                target,
                here=here,
                header_id=self._headers.next("order"),
                header=self._header,
                map_id=self.p.map_id,
            )

        watch = _Watch(plan, encode, snapshot)
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
        """Ask the vehicle's ``state`` (a fresh one); never publish an order."""
        try:
            target = resolve_target(
                self.layout,
                command.payload,
                robot_type=self.robot_type,
                reach_m=math.inf,
                mobile=True,
                pose=self.pose(),
            )
        except CommandRefused:
            target = None  # the layout changed since: judge by the target's name alone
        plan = plan_for(command, self._dock_action_of(command), target, self.p.allowed_deviation_xy)
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
        watch = _Watch(plan, None, snapshot)
        watch.seen = True  # never re-sent
        return self._until_final(command, watch)

    def shutdown(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._requests.wake.set()
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
            watch.encode is not None
            and self._resend_due(watch)
            and _online(snapshot)
            and self.link.publish(self._topics["order"], watch.encode(), qos=QOS["order"])
        ):
            watch.last_sent = time.monotonic()
            if watch.sequence_at_send < 0:
                watch.sequence_at_send = snapshot.state_sequence
        return verdict

    def _resend_due(self, watch: _Watch) -> bool:
        return time.monotonic() - watch.last_sent >= self.p.resend_period_s

    def _until_shown(self, watch: _Watch) -> Verdict:
        deadline = time.monotonic() + self.p.accept_timeout_s
        asked_at: int | None = None  # state sequence when the last word was asked for
        while True:
            verdict = self._step(watch)
            if watch.seen or watch.unknown or verdict.phase is Phase.REFUSED:
                return verdict
            if self._stop.is_set():
                raise ExecutionAborted(f"{self.robot_id}: stopped before the vehicle answered")
            if asked_at is None and time.monotonic() >= deadline:
                # Neither shown nor refused (a vehicle that drops what it cannot read says
                # nothing): stop sending, and ask for a state. One published after every
                # copy reached the vehicle (a connection delivers in order) settles it.
                watch.encode = None
                snapshot = self.view.snapshot()
                asked_at = snapshot.state_sequence
                self._requests.want(state=True, factsheet=False, view=snapshot)
            if asked_at is not None:
                snapshot = self.view.snapshot()
                if snapshot.state_sequence > asked_at + 1 and not snapshot.state_stale:
                    verdict = self._step(watch)
                    if watch.seen or watch.unknown or verdict.phase is Phase.REFUSED:
                        return verdict
                    current = snapshot.state.orderId if snapshot.state is not None else ""
                    raise CommandRefused(
                        f"vehicle {self.p.serial_number} neither took nor refused order "
                        f"{watch.plan.order_id!r} within {self.p.accept_timeout_s:g} s (its "
                        f"order: {current!r}); nothing ran, a retry sends it again",
                        NO_ANSWER,
                    )
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
            if action is not None and action.result():
                extra["action_result"] = action.result()
                if watch.plan.action_type in {"pick", "drop"}:
                    extra["item"] = action.result()
        return result_body(self.robot_id, command, watch.plan.target, self.pose(), **extra)


def _online(snapshot: Snapshot) -> bool:
    """ONLINE on ``connection``; or, where the broker kept no ``connection`` message for us
    (it keeps no retained messages, or lost them in a restart), a state received."""
    return snapshot.connection == "ONLINE" or (
        snapshot.connection == "" and snapshot.state is not None
    )


class _Requests:
    """What the backend wants from the vehicle: a state, a factsheet, newer than the ones it
    held when it asked. ``wake``: ask now rather than at the next period."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.wake = threading.Event()
        self._state_after: int | None = None
        self._factsheet_after: int | None = None

    def want(self, *, state: bool, factsheet: bool, view: Snapshot) -> None:
        with self._lock:
            if state:
                self._state_after = view.state_sequence
            if factsheet:
                self._factsheet_after = view.factsheets
        self.wake.set()

    def missing(self, view: Snapshot) -> list[str]:
        """The requests still unanswered (instant action types); forgets answered ones."""
        with self._lock:
            if self._state_after is not None and (
                view.state_sequence > self._state_after and not view.state_stale
            ):
                self._state_after = None
            if self._factsheet_after is not None and view.factsheets > self._factsheet_after:
                self._factsheet_after = None
            wanted = []
            if self._state_after is not None:
                wanted.append("stateRequest")
            if self._factsheet_after is not None:
                wanted.append("factsheetRequest")
            return wanted
