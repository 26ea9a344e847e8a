"""vda5050-sdk's own vehicle (test/support/sdk_vehicle.py), a VDA 5050 implementation nobody
here wrote, against a real password-protected mosquitto and a bare paho client acting as
master control: ONLINE, a factsheet only when asked, an order driven to its last node once,
a cancelOrder that stops it where it is, the same over TLS, OFFLINE on a stop and the last
will on a kill. Every message on the vehicle's topics is checked against the official
schemas."""

from __future__ import annotations

import itertools
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.bringup.mosquitto import LocalMosquitto, mosquitto_available, tls_available
from fleet_idempotency.testing.agent_under_test import wait_until

from support.sdk_vehicle import SDK_INSTANT_ACTIONS, SdkVehicle
from support.vda5050_stand import SchemaCheck

pytestmark = pytest.mark.skipif(
    not mosquitto_available(),
    reason="Debian's mosquitto is not installed (scripts/setup.sh --test installs it)",
)

USERNAME, PASSWORD = "fleet", "sdk-s3cret"
MANUFACTURER, SERIAL = "sdk-maker", "sdk-1"
PREFIX = f"uagv/v2/{MANUFACTURER}/{SERIAL}"
MAP_ID = "sdk-map"
ACTIONS = ("pick", "drop", "dock", "startCharging")


class MasterControl:
    """A bare paho client on the vehicle's topics: everything published there, and ours."""

    def __init__(self, broker: LocalMosquitto) -> None:
        from paho.mqtt.client import Client, MQTTMessage
        from paho.mqtt.enums import CallbackAPIVersion

        self.messages: list[tuple[float, str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._header_ids = itertools.count(1)
        self._action_ids = itertools.count(1)
        subscribed = threading.Event()
        self.client = Client(CallbackAPIVersion.VERSION2, client_id="master-control")
        self.client.username_pw_set(USERNAME, PASSWORD)
        if broker.ca_file is not None:
            self.client.tls_set_context(ssl.create_default_context(cafile=str(broker.ca_file)))

        def on_message(_c: Any, _u: Any, message: MQTTMessage) -> None:
            with self._lock:
                entry = (time.monotonic(), message.topic, json.loads(message.payload))
                self.messages.append(entry)

        self.client.on_connect = lambda client, *_: client.subscribe(f"{PREFIX}/#", 1)
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.on_message = on_message
        self.client.connect(broker.host, broker.port, keepalive=10)
        self.client.loop_start()
        assert subscribed.wait(10), "master control could not subscribe"

    def of(self, name: str, *, since: float = 0.0) -> list[dict[str, Any]]:
        with self._lock:
            return [
                m for t, topic, m in self.messages if topic == f"{PREFIX}/{name}" and t >= since
            ]

    def send(self, name: str, body: dict[str, Any]) -> None:
        header = {
            "headerId": next(self._header_ids),
            "timestamp": datetime.now(UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "version": "2.1.0",
            "manufacturer": MANUFACTURER,
            "serialNumber": SERIAL,
        }
        self.client.publish(f"{PREFIX}/{name}", json.dumps(header | body)).wait_for_publish(5)

    def instant_action(self, action_type: str) -> str:
        action_id = f"{action_type}-{next(self._action_ids)}"
        action = {"actionId": action_id, "actionType": action_type, "blockingType": "NONE"}
        self.send("instantActions", {"actions": [action]})
        return action_id

    def wait_state(self, condition: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        return wait_until(lambda: next((s for s in self.of("state") if condition(s)), None), what)

    def wait_done(self, action_id: str) -> dict[str, Any]:
        """The first state reporting ``action_id`` FINISHED. The vehicle reads its topics in
        one loop, in the order they were sent: all sent before it was handled before it."""
        return self.wait_state(
            lambda s: any(
                a["actionId"] == action_id and a["actionStatus"] == "FINISHED"
                for a in s["actionStates"]
            ),
            f"instant action {action_id} to finish",
        )

    def connection_states(self) -> list[str]:
        return [m["connectionState"] for m in self.of("connection")]

    def assert_every_message_matches_the_official_schemas(self) -> None:
        schemas = SchemaCheck()
        with self._lock:
            messages = list(self.messages)
        problems = [
            f"{topic}: {errors[:3]}"
            for _t, topic, message in messages
            if (errors := schemas.errors(topic.rsplit("/", 1)[1], message))
        ]
        assert not problems, "\n".join(problems[:10])
        names = {topic.rsplit("/", 1)[1] for _t, topic, _m in messages}
        assert {"state", "connection"} <= names, f"too little was checked: {names}"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def order(
    order_id: str, points: list[tuple[float, float]], last_action: str = ""
) -> dict[str, Any]:
    """Nodes n0, n1, ... at ``points`` (n0 where the vehicle stands), edges between them."""
    nodes = [
        {
            "nodeId": f"n{i}",
            "sequenceId": 2 * i,
            "released": True,
            "nodePosition": {"x": x, "y": y, "mapId": MAP_ID, "allowedDeviationXY": 0.5},
            "actions": [],
        }
        for i, (x, y) in enumerate(points)
    ]
    if last_action:
        action = {"actionId": f"{order_id}/{last_action}", "actionType": last_action}
        nodes[-1]["actions"] = [action | {"blockingType": "HARD"}]
    edges = [
        {
            "edgeId": f"e{i}",
            "sequenceId": 2 * i + 1,
            "startNodeId": f"n{i}",
            "endNodeId": f"n{i + 1}",
            "released": True,
            "actions": [],
        }
        for i in range(len(points) - 1)
    ]
    return {"orderId": order_id, "orderUpdateId": 0, "nodes": nodes, "edges": edges}


class Stand:
    """A broker (TLS or not), master control on it, and the SDK vehicles started."""

    def __init__(self, tmp_path: Path, *, tls: bool) -> None:
        self.tmp_path = tmp_path
        self.broker = LocalMosquitto(username=USERNAME, password=PASSWORD, tls=tls).start()
        self.master = MasterControl(self.broker)
        self.vehicles: list[SdkVehicle] = []

    def vehicle(self, **options: Any) -> SdkVehicle:
        vehicle = SdkVehicle(
            broker_host=self.broker.host,
            broker_port=self.broker.port,
            username=USERNAME,
            password=PASSWORD,
            tls_ca=self.broker.ca_file,
            manufacturer=MANUFACTURER,
            serial_number=SERIAL,
            log_file=self.tmp_path / f"vehicle-{len(self.vehicles) + 1}.log",
            start=(0.0, 0.0),
            map_id=MAP_ID,
            actions=ACTIONS,
            **options,
        )
        self.vehicles.append(vehicle.start())
        vehicle.wait_ready()
        return vehicle

    def close(self) -> None:
        for vehicle in self.vehicles:
            vehicle.kill()
        self.master.close()
        self.broker.close()


@pytest.fixture
def stand(tmp_path: Path) -> Iterator[Stand]:
    stand = Stand(tmp_path, tls=False)
    yield stand
    stand.close()


def test_it_comes_online_sends_its_factsheet_only_when_asked_and_goes_offline(
    stand: Stand,
) -> None:
    master = stand.master
    vehicle = stand.vehicle()
    wait_until(lambda: "ONLINE" in master.connection_states(), "the vehicle to come ONLINE")
    master.wait_done(master.instant_action("stateRequest"))
    assert master.of("factsheet") == [], "a factsheet nobody asked for"

    master.instant_action("factsheetRequest")
    factsheet = wait_until(lambda: master.of("factsheet"), "a factsheet")[0]
    scoped = {
        scope: [
            a["actionType"]
            for a in factsheet["protocolFeatures"]["agvActions"]
            if scope in a["actionScopes"]
        ]
        for scope in ("NODE", "INSTANT")
    }
    assert scoped == {"NODE": list(ACTIONS), "INSTANT": list(SDK_INSTANT_ACTIONS)}

    assert vehicle.stop() == 0
    wait_until(lambda: master.connection_states()[-1] == "OFFLINE", "OFFLINE on a stop")
    master.assert_every_message_matches_the_official_schemas()


def test_an_order_is_driven_to_its_last_node_once_even_when_sent_again(stand: Stand) -> None:
    master = stand.master
    vehicle = stand.vehicle(node_delay=0.1, action_delay=0.1)
    sent = order("order-1", [(0.0, 0.0), (2.0, 1.0)], last_action="pick")
    master.send("order", sent)
    done = master.wait_state(
        lambda s: s["orderId"] == "order-1" and s["nodeStates"] == [] and s["lastNodeId"] == "n1",
        "order-1 driven to its last node",
    )
    assert (done["agvPosition"]["x"], done["agvPosition"]["y"]) == (2.0, 1.0)
    wait_until(
        lambda: any(e["event"] == "order_finished" for e in vehicle.effects()), "order_finished"
    )
    master.wait_state(
        lambda s: any(
            (a["actionId"], a["actionStatus"]) == ("order-1/pick", "FINISHED")
            for a in s["actionStates"]
        ),
        "the pick at the last node to finish",
    )

    master.send("order", sent)  # the same orderId and orderUpdateId: a re-send
    master.wait_done(master.instant_action("stateRequest"))
    assert vehicle.executions("order-1") == 1, vehicle.effects()
    assert [e["event"] for e in vehicle.effects() if "order_id" in e] == [
        "order_started",
        "order_finished",
    ]
    assert vehicle.effects()[-1]["last_node_id"] == "n1"
    master.assert_every_message_matches_the_official_schemas()


def test_a_cancelled_order_stops_where_it_is(stand: Stand) -> None:
    master = stand.master
    node_delay = 0.6
    vehicle = stand.vehicle(node_delay=node_delay, action_delay=0.1)
    master.send("order", order("long-1", [(float(x), 0.0) for x in range(8)]))
    master.wait_state(
        lambda s: s["orderId"] == "long-1" and s["lastNodeId"] == "n1", "the vehicle under way"
    )

    cancelled_at = master.wait_done(master.instant_action("cancelOrder"))
    assert cancelled_at["nodeStates"] == [] and cancelled_at["edgeStates"] == []
    assert cancelled_at["lastNodeId"] != "n7"
    # Several node delays later, with states coming every state interval: no node more.
    later = time.monotonic() + 4 * node_delay
    wait_until(lambda: master.of("state", since=later), "states after the cancel")
    after = master.of("state")[master.of("state").index(cancelled_at) :]
    assert {(s["lastNodeId"], json.dumps(s["agvPosition"])) for s in after} == {
        (cancelled_at["lastNodeId"], json.dumps(cancelled_at["agvPosition"]))
    }
    assert all(s["nodeStates"] == [] for s in after)
    ends = [e for e in vehicle.effects() if e["event"] != "ready"]
    assert [e["event"] for e in ends] == ["order_started", "order_cancelled"]
    assert ends[-1]["last_node_id"] == cancelled_at["lastNodeId"]
    master.assert_every_message_matches_the_official_schemas()


@pytest.mark.skipif(not tls_available(), reason="Debian's openssl is not installed")
def test_over_tls_it_comes_online_and_drives_an_order(tmp_path: Path) -> None:
    stand = Stand(tmp_path, tls=True)
    try:
        master = stand.master
        vehicle = stand.vehicle(node_delay=0.1, action_delay=0.1)
        wait_until(lambda: "ONLINE" in master.connection_states(), "the vehicle ONLINE over TLS")
        master.send("order", order("tls-1", [(0.0, 0.0), (1.0, 0.0)]))
        master.wait_state(
            lambda s: s["orderId"] == "tls-1" and s["nodeStates"] == [] and s["lastNodeId"] == "n1",
            "tls-1 driven to its last node",
        )
        assert vehicle.executions("tls-1") == 1
        assert vehicle.stop() == 0
        wait_until(lambda: master.connection_states()[-1] == "OFFLINE", "OFFLINE on a stop")
        master.assert_every_message_matches_the_official_schemas()
    finally:
        stand.close()


def test_a_killed_vehicle_is_announced_by_its_last_will(stand: Stand) -> None:
    master = stand.master
    vehicle = stand.vehicle(keepalive=2)
    wait_until(lambda: "ONLINE" in master.connection_states(), "the vehicle to come ONLINE")
    vehicle.kill()
    # The broker notices the silence after 1.5 keep-alive periods.
    wait_until(
        lambda: master.connection_states()[-1] == "CONNECTIONBROKEN",
        "the last will (CONNECTIONBROKEN)",
        timeout_s=15,
    )
    master.assert_every_message_matches_the_official_schemas()
