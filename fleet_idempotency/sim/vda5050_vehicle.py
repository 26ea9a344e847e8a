"""A simulated VDA 5050 vehicle: a process of its own that speaks only MQTT to master
control and acts in the world simulator, where every side effect is counted.

What it follows of VDA 5050 (2.1 by default; 3.0's messages with ``--protocol-version
3.0.0``: error names, CONNECTION_BROKEN, ``mobileRobotPosition``, ``instantActionStates``,
``actionResult``). It does no more than the spec obliges a vehicle to, so that it cannot hide
what master control must ask for:

- ``connection`` (2.1 section 6.14): ONLINE, retained, QoS 1, on every connection; the last
  will is CONNECTIONBROKEN; OFFLINE on an orderly stop.
- ``factsheet``: only on a ``factsheetRequest`` (``--factsheet-at-start``: also at start-up,
  retained, as some vehicles do), listing the node actions it can do.
- ``state`` (2.1 section 6.10): on every event and every ``--state-period`` seconds;
  ``nodeStates``/``edgeStates`` list what is still to traverse, ``actionStates`` every action
  of the current order, ``orderId``/``lastNodeId`` kept after the order ends.
- ``order`` acceptance (2.1 section 6.6.2 Figure 8, section 6.6.4): a malformed order is
  refused (validationError); the same orderId with a lower orderUpdateId too
  (orderUpdateError), with the same orderUpdateId it is ignored (a re-send); a new orderId
  while an order is active is refused (OTHER_ORDER_ACTIVE; 2.1 has no name of its own for
  it and reports orderError); actions it cannot do are refused (orderError); a first node
  out of its deviation range too (noRouteError). A refusal keeps the previous order, and the
  error stays in ``state`` until a new order is accepted. Order updates (a higher
  orderUpdateId) are not simulated and refused.
- ``instantActions``: cancelOrder, stateRequest, factsheetRequest.

In the world the vehicle acts with the order's ``orderId`` as the key (the ``vda5050``
backend sends the idempotency key as orderId), so the world oracle counts each side
effect per key: ``arrive`` at the end of an order without actions, ``pick``, ``place``
(for ``drop``), ``dock`` (for its docking action).

A test-only control topic, ``fleet_idem_sim/<manufacturer>/<serialNumber>/faults``,
takes ``{"drop_orders": n}`` (lose the next n orders, as QoS 0 may) and
``{"mute_state": true|false}`` (publish no state for a while). A restart forgets the
order: the process keeps nothing on disk.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fleet_idempotency.geometry import Pose
from fleet_idempotency.sim.profiles import PROFILES
from fleet_idempotency.sim.world import WorldActionFailed, WorldActionName
from fleet_idempotency.sim.world_link import WorldLink
from fleet_idempotency.vda5050.messages import Action, InstantActions, Node, Order
from fleet_idempotency.vda5050.mqtt import BrokerSettings, MqttLink
from fleet_idempotency.vda5050.wire import (
    QOS,
    BadMessage,
    HeaderIds,
    connection_broken,
    decode,
    encode,
    major_version_of,
)
from fleet_idempotency.vda5050.wire import timestamp as now_timestamp
from fleet_idempotency.vda5050.wire import topic as make_topic

NODE_ACTIONS = ("pick", "drop", "dock", "startCharging")
INSTANT_ACTIONS = ("cancelOrder", "stateRequest", "factsheetRequest")
WORLD_ACTION: dict[str, WorldActionName] = {
    "pick": "pick",
    "drop": "place",
    "dock": "dock",
    "startCharging": "dock",
}
STEP_WALL_S = 0.05  # pose updates while driving, in wall time


@dataclass
class VehicleConfig:
    robot_id: str
    robot_type: str
    manufacturer: str
    serial_number: str
    broker: BrokerSettings
    interface_name: str = "uagv"
    major_version: str = "v2"
    protocol_version: str = "2.1.0"
    map_id: str = "warehouse"
    time_scale: float = 0.05
    state_period_s: float = 1.0
    start: Pose = field(default_factory=Pose)
    # Nothing to do for a move of zero length: a vehicle still takes this long.
    min_order_s: float = 0.0
    factsheet_at_start: bool = False


def _error(
    error_type: str, description: str, level: str = "WARNING", **references: str
) -> dict[str, Any]:
    error: dict[str, Any] = {"errorType": error_type, "errorLevel": level}
    if references:
        error["errorReferences"] = [
            {"referenceKey": key, "referenceValue": value} for key, value in references.items()
        ]
    error["errorDescription"] = description
    return error


class SimulatedVehicle:
    """The vehicle's logic; ``world`` is where it acts (a WorldLink)."""

    def __init__(self, config: VehicleConfig, world: WorldLink) -> None:
        if config.robot_type not in PROFILES or PROFILES[config.robot_type].speed_m_s <= 0:
            raise ValueError(f"a VDA 5050 vehicle must be a mobile robot, not {config.robot_type}")
        self.config = config
        self.profile = PROFILES[config.robot_type]
        self.world = world
        self.v3 = config.protocol_version.startswith("3")
        self._result_key = "actionResult" if self.v3 else "resultDescription"
        self._lock = threading.RLock()
        self._headers = HeaderIds()
        self._topics = {
            name: make_topic(
                config.interface_name,
                config.major_version,
                config.manufacturer,
                config.serial_number,
                name,
            )
            for name in ("order", "instantActions", "state", "connection", "factsheet")
        }
        self.faults_topic = f"fleet_idem_sim/{config.manufacturer}/{config.serial_number}/faults"
        known = world.locate(config.robot_id)
        self.pose = known if known is not None else config.start
        # The state, as it is published.
        self.order: Order | None = None
        self.order_content = b""
        self.node_states: list[dict[str, Any]] = []
        self.edge_states: list[dict[str, Any]] = []
        self.action_states: list[dict[str, Any]] = []
        # 3.0 keeps instant actions apart from the order's (2.x: among ``action_states``).
        self.instant_action_states: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.last_node_id = ""
        self.last_node_sequence_id = 0
        self.driving = False
        self.counters: dict[str, int] = {}
        self.drop_orders = 0
        self.mute_state = False
        self._cancel = threading.Event()
        self._stop = threading.Event()
        self._runner: threading.Thread | None = None
        self.link = MqttLink(
            config.broker,
            f"fleet-idem-{config.serial_number}-vehicle",
            on_message=self._on_message,
            on_connect=self._on_connect,
            will=(
                self._topics["connection"],
                self._connection_message(connection_broken(config.protocol_version)),
                QOS["connection"],
                True,
            ),
        )
        for name in ("order", "instantActions"):
            self.link.subscribe(self._topics[name], QOS[name])
        self.link.subscribe(self.faults_topic, 1)

    # --- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.link.start()
        threading.Thread(target=self._periodic_state, name="state", daemon=True).start()

    def stop(self) -> None:
        """Orderly: OFFLINE (retained), then disconnect; the order is not finished."""
        self._stop.set()
        self._cancel.set()
        self.link.stop(
            last_words=(
                self._topics["connection"],
                self._connection_message("OFFLINE"),
                QOS["connection"],
                True,
            )
        )

    def _count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1

    # --- messages out -------------------------------------------------------------------------
    def _header(self, topic_name: str) -> dict[str, Any]:
        return {
            "headerId": self._headers.next(topic_name),
            "timestamp": now_timestamp(),
            "version": self.config.protocol_version,
            "manufacturer": self.config.manufacturer,
            "serialNumber": self.config.serial_number,
        }

    def _connection_message(self, connection_state: str) -> bytes:
        return encode({**self._header("connection"), "connectionState": connection_state})

    def _on_connect(self) -> None:
        self.link.publish(
            self._topics["connection"],
            self._connection_message("ONLINE"),
            qos=QOS["connection"],
            retain=True,
        )
        if self.config.factsheet_at_start:
            self.publish_factsheet()
        self.publish_state(force=True)

    def publish_factsheet(self) -> None:
        self.link.publish(
            self._topics["factsheet"],
            encode(self.factsheet()),
            qos=QOS["factsheet"],
            retain=self.config.factsheet_at_start,
        )

    def node_actions(self) -> list[str]:
        return [
            name
            for name in NODE_ACTIONS
            if name not in ("pick", "drop") or self.config.robot_type == "forklift"
        ]

    def factsheet(self) -> dict[str, Any]:
        profile = self.profile
        # No ``blockingTypes``: the official 2.1 factsheet schema declares it an array whose
        # value must be one of the strings NONE/SOFT/HARD, which no array can be; it is
        # optional, so it is left out rather than sent invalid.
        actions = [
            {"actionType": name, "actionScopes": ["NODE"]} for name in self.node_actions()
        ] + [{"actionType": name, "actionScopes": ["INSTANT"]} for name in INSTANT_ACTIONS]
        features = {
            "optionalParameters": [],
            ("mobileRobotActions" if self.v3 else "agvActions"): actions,
        }
        return {
            **self._header("factsheet"),
            "typeSpecification": {
                "seriesName": f"fleet-idem simulated {self.config.robot_type}",
                "agvKinematic": "DIFF",
                "agvClass": "FORKLIFT" if self.config.robot_type == "forklift" else "CARRIER",
                "maxLoadMass": 1000 if self.config.robot_type == "forklift" else 100,
                "localizationTypes": ["NATURAL"],
                "navigationTypes": ["AUTONOMOUS"],
            },
            "physicalParameters": {
                "speedMin": 0.0,
                "speedMax": profile.speed_m_s,
                "accelerationMax": 1.0,
                "decelerationMax": 1.0,
                "heightMax": 2.0,
                "width": 1.0,
                "length": 1.5,
            },
            "protocolLimits": {
                "maxStringLens": {},
                "maxArrayLens": {},
                "timing": {"minOrderInterval": 0.0, "minStateInterval": 0.0},
            },
            "protocolFeatures": features,
            "agvGeometry": {},
            "loadSpecification": {},
        }

    def state(self) -> dict[str, Any]:
        with self._lock:
            order = self.order
            position = {
                "x": round(self.pose.x, 3),
                "y": round(self.pose.y, 3),
                "theta": round(self.pose.theta, 3),
                "mapId": self.config.map_id,
            }
            state = {
                **self._header("state"),
                "orderId": order.orderId if order is not None else "",
                "orderUpdateId": order.orderUpdateId if order is not None else 0,
                "lastNodeId": self.last_node_id,
                "lastNodeSequenceId": self.last_node_sequence_id,
                "nodeStates": [dict(n) for n in self.node_states],
                "edgeStates": [dict(e) for e in self.edge_states],
                "driving": self.driving,
                "actionStates": [dict(a) for a in self.action_states],
                "operatingMode": "AUTOMATIC",
                "errors": [dict(e) for e in self.errors],
                "safetyState": {"eStop": "NONE", "fieldViolation": False},
            }
            if self.v3:
                state |= {
                    "instantActionStates": [dict(a) for a in self.instant_action_states],
                    "powerSupply": {"stateOfCharge": 80.0, "charging": False},
                    "mobileRobotPosition": {**position, "localized": True},
                }
            else:
                state |= {
                    "batteryState": {"batteryCharge": 80.0, "charging": False},
                    "agvPosition": {**position, "positionInitialized": True},
                }
            return state

    def publish_state(self, *, force: bool = False) -> None:
        if self.mute_state and not force:
            return
        self.link.publish(self._topics["state"], encode(self.state()), qos=QOS["state"])

    def _periodic_state(self) -> None:
        while not self._stop.wait(self.config.state_period_s):
            self.publish_state()

    # --- messages in (the MQTT thread) --------------------------------------------------------
    def _on_message(self, topic_name: str, payload: bytes) -> None:
        if topic_name == self.faults_topic:
            self._take_faults(payload)
        elif topic_name == self._topics["order"]:
            self._take_order(payload)
        elif topic_name == self._topics["instantActions"]:
            self._take_instant_actions(payload)

    def _take_faults(self, payload: bytes) -> None:
        try:
            faults = decode(payload)
        except BadMessage:
            return
        with self._lock:
            self.drop_orders = int(faults.get("drop_orders", self.drop_orders))
            if "mute_state" in faults:
                self.mute_state = bool(faults["mute_state"])
        if not self.mute_state:
            self.publish_state()

    def _decode(self, payload: bytes, kind: str) -> dict[str, Any] | None:
        try:
            return decode(payload)
        except BadMessage:
            self._count(f"bad_{kind}")
            self._refuse("validationError", f"the {kind} is not a JSON object")
            return None

    def _for_me(self, message: dict[str, Any]) -> bool:
        mine = (
            message.get("serialNumber") == self.config.serial_number
            and message.get("manufacturer") == self.config.manufacturer
        )
        if not mine:
            self._count("other_vehicle")
        return mine

    def _refuse(self, error_type: str, description: str, **references: str) -> None:
        """Refuse an order: keep the current one, report the warning until a new one."""
        self._count(f"refused_{error_type}")
        with self._lock:
            self.errors = [e for e in self.errors if e["errorLevel"] != "WARNING"] + [
                _error(error_type, description, **references)
            ]
        self.publish_state(force=True)

    def _take_order(self, payload: bytes) -> None:
        with self._lock:
            if self.drop_orders > 0:
                self.drop_orders -= 1
                self._count("orders_dropped")
                return
        message = self._decode(payload, "order")
        if message is None or not self._for_me(message):
            return
        try:
            order = Order.model_validate(message)
        except ValidationError as error:
            order_id = message.get("orderId")
            references = {"orderId": order_id} if isinstance(order_id, str) else {}
            self._refuse(
                "VALIDATION_FAILURE" if self.v3 else "validationError",
                f"malformed order: {error.error_count()} problem(s)",
                topic="order",
                **references,
            )
            return
        with self._lock:
            current = self.order
            if current is not None and order.orderId == current.orderId:
                if order.orderUpdateId == current.orderUpdateId:
                    self._count("order_resent_ignored")  # the same order again: ignore it
                    return
                if order.orderUpdateId < current.orderUpdateId:
                    self._refuse(
                        "OUTDATED_ORDER_UPDATE" if self.v3 else "orderUpdateError",
                        f"orderUpdateId {order.orderUpdateId} is lower than the current "
                        f"{current.orderUpdateId}",
                        orderId=order.orderId,
                        orderUpdateId=str(order.orderUpdateId),
                    )
                    return
                self._refuse(
                    "orderError",
                    "order updates are not simulated",
                    orderId=order.orderId,
                    orderUpdateId=str(order.orderUpdateId),
                )
                return
            if not self._idle():
                assert current is not None
                self._refuse(
                    "OTHER_ORDER_ACTIVE" if self.v3 else "orderError",
                    f"OTHER_ORDER_ACTIVE: order {current.orderId!r} is still active",
                    orderId=order.orderId,
                )
                return
            problem = self._cannot_do(order)
            if problem is not None:
                self._refuse(problem[0], problem[1], orderId=order.orderId, **problem[2])
                return
            self._accept(order)
        self.publish_state()

    def _idle(self) -> bool:
        return (
            not self.node_states
            and not self.edge_states
            and all(a["actionStatus"] in ("FINISHED", "FAILED") for a in self.action_states)
        )

    def _cannot_do(self, order: Order) -> tuple[str, str, dict[str, str]] | None:
        offered = set(self.node_actions())
        for node in order.nodes:
            for action in node.actions:
                if action.actionType not in offered:
                    return (
                        "INVALID_ORDER_ACTION" if self.v3 else "orderError",
                        f"cannot do {action.actionType!r}",
                        {"actionId": action.actionId},
                    )
            if node.nodePosition is None:
                return (
                    "VALIDATION_FAILURE" if self.v3 else "validationError",
                    "this vehicle needs nodePosition",
                    {"nodeId": node.nodeId},
                )
        if not order.nodes:
            return ("VALIDATION_FAILURE" if self.v3 else "validationError", "no nodes", {})
        first = order.nodes[0].nodePosition
        assert first is not None
        deviation = first.deviation_xy() or 0.5
        if math.hypot(first.x - self.pose.x, first.y - self.pose.y) > deviation:
            return (
                "START_NODE_OUT_OF_RANGE" if self.v3 else "noRouteError",
                "the first node is out of the vehicle's deviation range",
                {"nodeId": order.nodes[0].nodeId},
            )
        return None

    def _accept(self, order: Order) -> None:
        self._count("orders_accepted")
        self.order = order
        self.errors = []
        self.node_states = [
            {"nodeId": n.nodeId, "sequenceId": n.sequenceId, "released": n.released}
            for n in order.nodes
        ]
        self.edge_states = [
            {"edgeId": e.edgeId, "sequenceId": e.sequenceId, "released": e.released}
            for e in order.edges
        ]
        self.action_states = [
            {"actionId": a.actionId, "actionType": a.actionType, "actionStatus": "WAITING"}
            for n in order.nodes
            for a in n.actions
        ]
        self._cancel = threading.Event()
        self._runner = threading.Thread(
            target=self._run, args=(order, self._cancel), name="order", daemon=True
        )
        self._runner.start()

    def _take_instant_actions(self, payload: bytes) -> None:
        message = self._decode(payload, "instantActions")
        if message is None or not self._for_me(message):
            return
        try:
            instant = InstantActions.model_validate(message)
        except ValidationError:
            self._refuse("validationError", "malformed instantActions", topic="instantActions")
            return
        for action in instant.actions:
            self._instant(action)
        self.publish_state(force=True)

    def _instant(self, action: Action) -> None:
        entry = {"actionId": action.actionId, "actionType": action.actionType}
        with self._lock:
            if action.actionType == "cancelOrder":
                if self._idle():
                    entry["actionStatus"] = "FAILED"
                    self.errors.append(
                        _error("noOrderToCancel", "no order", actionId=action.actionId)
                    )
                else:
                    self._cancel.set()
                    for state in self.action_states:
                        if state["actionStatus"] not in ("FINISHED", "FAILED"):
                            state["actionStatus"] = "FAILED"
                            state[self._result_key] = "cancelled"
                    self.node_states, self.edge_states = [], []
                    self.driving = False
                    entry["actionStatus"] = "FINISHED"
            elif action.actionType == "factsheetRequest":
                self.publish_factsheet()
                entry["actionStatus"] = "FINISHED"
            elif action.actionType == "stateRequest":
                entry["actionStatus"] = "FINISHED"
            else:
                entry["actionStatus"] = "FAILED"
                entry[self._result_key] = f"unknown instant action {action.actionType!r}"
            (self.instant_action_states if self.v3 else self.action_states).append(entry)

    # --- running an order (its own thread) ----------------------------------------------------
    def _run(self, order: Order, cancel: threading.Event) -> None:
        try:
            started = time.monotonic()
            nodes = order.nodes
            plain_move = not any(n.actions for n in nodes)

            def reach(node: Node) -> None:
                if plain_move and node is nodes[-1]:
                    # Arrived in the world before the state that drops the last node says
                    # so: master control may call the order done on that state.
                    self._wait(
                        max(0.0, self.config.min_order_s - (time.monotonic() - started)), cancel
                    )
                    self._act(order.orderId, "arrive", node.nodeId)
                self._reach(node.nodeId, node.sequenceId, order, cancel)

            reach(nodes[0])
            for edge, node in zip(order.edges, nodes[1:], strict=False):
                assert node.nodePosition is not None
                self._drive(node.nodePosition.x, node.nodePosition.y, edge.edgeId, cancel)
                reach(node)
        except _Cancelled:
            pass
        except Exception as error:  # the vehicle must never die of one order
            with self._lock:
                self.errors.append(
                    _error("internalError", repr(error)[:200], "FATAL", orderId=order.orderId)
                )
        finally:
            with self._lock:
                self.driving = False
        self.publish_state()

    def _wait(self, seconds: float, cancel: threading.Event) -> None:
        if seconds > 0 and (cancel.wait(seconds) or self._stop.is_set()):
            raise _Cancelled

    def _drive(self, x: float, y: float, edge_id: str, cancel: threading.Event) -> None:
        start = self.pose
        distance = math.hypot(x - start.x, y - start.y)
        travel_wall_s = distance / self.profile.speed_m_s * self.config.time_scale
        theta = math.atan2(y - start.y, x - start.x) if distance > 0 else start.theta
        with self._lock:
            self.driving = distance > 0
        self.publish_state()
        steps = max(1, math.ceil(travel_wall_s / STEP_WALL_S))
        for step in range(1, steps + 1):
            self._wait(travel_wall_s / steps, cancel)
            fraction = step / steps
            pose = Pose(
                x=start.x + (x - start.x) * fraction,
                y=start.y + (y - start.y) * fraction,
                theta=theta,
            )
            with self._lock:
                self.pose = pose
            self.world.set_pose(self.config.robot_id, pose)
        with self._lock:
            self.driving = False
            self.edge_states = [e for e in self.edge_states if e["edgeId"] != edge_id]

    def _reach(self, node_id: str, sequence_id: int, order: Order, cancel: threading.Event) -> None:
        """Traverse a node (2.1 section 6.10.2): drop its nodeState, then run its actions."""
        with self._lock:
            if cancel.is_set():
                raise _Cancelled
            self.node_states = [n for n in self.node_states if n["sequenceId"] != sequence_id]
            self.last_node_id, self.last_node_sequence_id = node_id, sequence_id
        self.publish_state()
        node = next(n for n in order.nodes if n.sequenceId == sequence_id)
        for action in node.actions:
            self._run_action(order, node_id, action, cancel)

    def _run_action(
        self, order: Order, node_id: str, action: Action, cancel: threading.Event
    ) -> None:
        self._set_action(action.actionId, "RUNNING")
        duration = (
            self.profile.docking_s
            if WORLD_ACTION[action.actionType] == "dock"
            else (self.profile.handling_s)
        )
        self._wait(duration / 2 * self.config.time_scale, cancel)
        target = action.parameter("target")
        target = target if isinstance(target, str) and target else node_id
        try:
            item = self._act(order.orderId, WORLD_ACTION[action.actionType], target)
        except WorldActionFailed as failure:
            with self._lock:
                self.errors.append(
                    _error(
                        "actionError",
                        str(failure),
                        orderId=order.orderId,
                        actionId=action.actionId,
                    )
                )
            self._set_action(action.actionId, "FAILED", str(failure))
            # The order cannot go on: the rest is given up, as after a cancelOrder.
            with self._lock:
                for state in self.action_states:
                    if state["actionStatus"] in ("WAITING", "INITIALIZING", "RUNNING"):
                        state["actionStatus"] = "FAILED"
                self.node_states, self.edge_states = [], []
            raise _Cancelled from None
        self._wait(duration / 2 * self.config.time_scale, cancel)
        self._set_action(action.actionId, "FINISHED", item or "done")

    def _set_action(self, action_id: str, status: str, result: str = "") -> None:
        with self._lock:
            for state in self.action_states:
                if state["actionId"] == action_id:
                    state["actionStatus"] = status
                    if result:
                        state[self._result_key] = result
        self.publish_state()

    def _act(self, key: str, action: WorldActionName, target: str) -> str:
        self._count(f"world_{action}")
        return self.world.act(self.config.robot_id, key, action, target, self.pose)


class _Cancelled(Exception):
    pass


# --- the process ----------------------------------------------------------------------------
def parse_arguments(argv: Sequence[str]) -> VehicleConfig:
    parser = argparse.ArgumentParser(
        prog="vda5050_vehicle", description="A simulated VDA 5050 vehicle (MQTT + world simulator)"
    )
    parser.add_argument("--robot-id", required=True)
    parser.add_argument("--robot-type", default="forklift", choices=["amr", "forklift"])
    parser.add_argument("--manufacturer", default="fleet-idem")
    parser.add_argument("--serial-number", required=True)
    parser.add_argument("--broker-host", default="127.0.0.1")
    parser.add_argument("--broker-port", type=int, default=1883)
    parser.add_argument("--username", default="")
    parser.add_argument("--password-env", default="FLEET_IDEM_MQTT_PASSWORD",
                        help="environment variable holding the broker password")  # fmt: skip
    parser.add_argument("--interface-name", default="uagv")
    parser.add_argument("--major-version", default="",
                        help="topic version level (default: from --protocol-version)")  # fmt: skip
    parser.add_argument("--protocol-version", default="2.1.0")
    parser.add_argument("--map-id", default="warehouse")
    parser.add_argument("--time-scale", type=float, default=0.05)
    parser.add_argument("--state-period", type=float, default=1.0)
    parser.add_argument("--start-x", type=float, default=0.0)
    parser.add_argument("--start-y", type=float, default=0.0)
    parser.add_argument("--min-order-s", type=float, default=0.0)
    parser.add_argument("--keepalive", type=int, default=4)
    parser.add_argument("--factsheet-at-start", action="store_true",
                        help="also publish the factsheet, retained, at start-up")  # fmt: skip
    arguments, _ros = parser.parse_known_args(list(argv))
    import os  # noqa: PLC0415

    return VehicleConfig(
        robot_id=arguments.robot_id,
        robot_type=arguments.robot_type,
        manufacturer=arguments.manufacturer,
        serial_number=arguments.serial_number,
        broker=BrokerSettings(
            broker_host=arguments.broker_host,
            broker_port=arguments.broker_port,
            username=arguments.username,
            password=os.environ.get(arguments.password_env, ""),
            keepalive_s=arguments.keepalive,
        ),
        interface_name=arguments.interface_name,
        major_version=arguments.major_version or major_version_of(arguments.protocol_version),
        protocol_version=arguments.protocol_version,
        map_id=arguments.map_id,
        time_scale=arguments.time_scale,
        state_period_s=arguments.state_period,
        start=Pose(x=arguments.start_x, y=arguments.start_y),
        min_order_s=arguments.min_order_s,
        factsheet_at_start=arguments.factsheet_at_start,
    )


def main(argv: Sequence[str] | None = None) -> int:
    import rclpy  # noqa: PLC0415 - the world link is the only ROS part
    from rclpy.signals import SignalHandlerOptions  # noqa: PLC0415

    from fleet_idempotency.ros.parent_watch import watch_parent  # noqa: PLC0415
    from fleet_idempotency.sim.world_link_ros import RosWorldLink, WorldUnavailable  # noqa: PLC0415

    config = parse_arguments(sys.argv[1:] if argv is None else argv)
    stop = threading.Event()
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda _s, _f: stop.set())
    watch_parent()  # under fleet-idem: exit with it, however it dies (SIGTERM to itself)
    context = rclpy.Context()
    rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    link = RosWorldLink(context, f"vehicle_{config.robot_id}")
    try:
        while not stop.is_set():
            try:
                link.wait_until_ready(2.0)
                break
            except WorldUnavailable:
                print(f"{config.serial_number}: waiting for the world simulator", flush=True)
        if stop.is_set():
            return 0
        vehicle = SimulatedVehicle(config, link)
        vehicle.start()
        print(
            f"vehicle {config.serial_number} ({config.robot_id}) up, broker "
            f"{config.broker.broker_host}:{config.broker.broker_port}",
            flush=True,
        )
        while not stop.wait(0.5):
            pass
        vehicle.stop()
        print(f"vehicle {config.serial_number} stopped: {json.dumps(vehicle.counters)}", flush=True)
        return 0
    finally:
        link.close()
        context.try_shutdown()


if __name__ == "__main__":
    sys.exit(main())
