"""The ``vda5050`` backend against a VDA 5050 vehicle nobody here wrote: the vehicle side of
vda5050-sdk (PyPI, test/support/sdk_vehicle.py), over a real password-protected Mosquitto,
also with TLS. The vehicle publishes its factsheet only when asked and its state only
every minute unless asked; the oracle for "at most once" is the vehicle's own record of
the orders it began. Every message on the broker is checked against the official 2.1
schemas.

Not here: a broker restart mid-order (vda5050-sdk 0.2's vehicle does not reconnect; the
package's simulated vehicle covers it, test_vda5050_faults.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.bringup.mosquitto import LocalMosquitto, tls_available
from fleet_idempotency.testing import BackendUnderTest, CommandSpec
from fleet_idempotency.testing.agent_under_test import AgentUnderTest, wait_until

from support.paths import FLEET_FILE
from support.sdk_vehicle import SdkVehicle
from support.vda5050_stand import USERNAME, Recorder, SchemaCheck, needs_mosquitto

pytestmark = needs_mosquitto

PASSWORD = "sdk-s3cret"
MANUFACTURER, SERIAL = "sdk-maker", "SDK-1"
PREFIX = f"uagv/v2/{MANUFACTURER}/{SERIAL}"
COMPLETED, FAILED, INTERRUPTED, REJECTED = 3, 4, 5, 6
SHORT = CommandSpec("move_to_waypoint", {"x": 3.0, "y": 0.5})
DOCK = CommandSpec("dock", {"dock": "D1"})


@dataclass
class SdkStand:
    broker: LocalMosquitto
    recorder: Recorder
    vehicle: SdkVehicle
    make_vehicle: Callable[[], SdkVehicle]

    def restart_vehicle(self, *, kill: bool) -> None:
        if kill:
            self.vehicle.kill()
        else:
            self.vehicle.stop()
        self.vehicle = self.make_vehicle().start()
        self.vehicle.wait_ready()

    def sent(self, topic_name: str) -> list[dict[str, Any]]:
        return [json.loads(p) for p in self.recorder.of(topic_name) if p]


def make_sdk_stand(
    tmp_path: Path, env: dict[str, str], *, tls: bool, node_delay: float
) -> tuple[SdkStand, Callable[[], None]]:
    broker = LocalMosquitto(username=USERNAME, password=PASSWORD, tls=tls).start()
    recorder = Recorder(broker, PREFIX, password=PASSWORD)
    boots = iter(range(1, 100))

    def make_vehicle() -> SdkVehicle:
        return SdkVehicle(
            broker_host=broker.host,
            broker_port=broker.port,
            manufacturer=MANUFACTURER,
            serial_number=SERIAL,
            log_file=tmp_path / f"sdk-vehicle-{next(boots)}.log",
            effects_file=tmp_path / "sdk-effects.jsonl",
            env=env,
            username=USERNAME,
            password=PASSWORD,
            tls_ca=broker.ca_file,
            start=(0.0, 0.5),
            map_id="warehouse",
            node_delay=node_delay,
            action_delay=0.2,
            # A minute between states unasked: an agent that waited for one would wait.
            state_interval=60.0,
            keepalive=2,
        )

    vehicle = make_vehicle().start()
    stand = SdkStand(broker, recorder, vehicle, make_vehicle)

    def close() -> None:
        stand.vehicle.stop()
        recorder.close()
        broker.close()

    try:
        vehicle.wait_ready()
    except BaseException:
        close()
        raise
    return stand, close


@pytest.fixture
def sdk_stand_of(tmp_path: Path, ros_env: dict[str, str]) -> Iterator[Callable[..., SdkStand]]:
    closers: list[Callable[[], None]] = []
    made: list[SdkStand] = []

    def make(*, tls: bool = False, node_delay: float = 0.2) -> SdkStand:
        stand, close = make_sdk_stand(tmp_path, ros_env, tls=tls, node_delay=node_delay)
        closers.append(close)
        made.append(stand)
        return stand

    try:
        yield make
        schemas = SchemaCheck()
        for stand in made:
            for name in ("order", "instantActions", "state", "connection", "factsheet"):
                for message in stand.sent(name):
                    assert schemas.errors(name, message) == [], (name, message)
    finally:
        for close in closers:
            close()


@pytest.fixture
def agent_for(
    ros_env: dict[str, str], ros_context: Any, tmp_path: Path
) -> Iterator[Callable[..., AgentUnderTest]]:
    running: list[AgentUnderTest] = []

    def start(stand: SdkStand, **params: Any) -> AgentUnderTest:
        backend_params = {
            "broker_host": stand.broker.host,
            "broker_port": stand.broker.port,
            "username": USERNAME,
            "password": PASSWORD,
            "manufacturer": MANUFACTURER,
            "serial_number": SERIAL,
            "fleet_file": str(FLEET_FILE),
            "resend_period_s": 0.3,
            "request_period_s": 0.5,
            "keepalive_s": 4,
            **params,
        }
        if stand.broker.ca_file is not None:
            backend_params["tls_ca_file"] = str(stand.broker.ca_file)
        subject = BackendUnderTest(
            backend="vda5050",
            robot_type="amr",
            params=backend_params,
            completes=SHORT,
            refused=CommandSpec("move_to_waypoint", {"waypoint": "NOWHERE"}),
            slow=SHORT,
            side_effects=stand.vehicle.executions,
            robot_id="sdk_1",
            reconciles_after_crash=True,
        )
        work = tmp_path / "agent"
        work.mkdir(exist_ok=True)
        agent = AgentUnderTest(subject, env=ros_env, work_dir=work, context=ros_context)
        running.append(agent)
        agent.start()
        return agent

    try:
        yield start
    finally:
        for agent in running:
            agent.close()
            print(f"----- agent -----\n{agent.log()[-4000:]}")


def consecutive(ids: list[int]) -> bool:
    return bool(ids) and ids == list(range(ids[0], ids[0] + len(ids)))


@pytest.mark.parametrize(
    "tls",
    [
        False,
        pytest.param(
            True,
            marks=pytest.mark.skipif(not tls_available(), reason="needs openssl for the CA"),
        ),
    ],
    ids=["password", "tls"],
)
def test_commands_run_once_on_a_vehicle_that_only_answers_when_asked(
    tls: bool, sdk_stand_of: Callable[..., SdkStand], agent_for: Callable[..., AgentUnderTest]
) -> None:
    stand = sdk_stand_of(tls=tls)
    assert stand.sent("factsheet") == [], "this vehicle publishes no factsheet unasked"
    agent = agent_for(stand)  # ready: it asked for the factsheet and a state
    kinds = [a["actionType"] for m in stand.sent("instantActions") for a in m["actions"]]
    assert "factsheetRequest" in kinds and "stateRequest" in kinds, kinds
    agent.send("sdk-move", SHORT)
    final = agent.final("sdk-move")
    assert final.state == COMPLETED, final
    # Duplicated deliveries of the current order (a broker's QoS 1 redelivery, a bridge):
    # the vehicle ignores a known orderId/orderUpdateId (2.1 section 6.6.4.3).
    order = next(p for p in stand.recorder.of("order") if json.loads(p)["orderId"] == "sdk-move")
    for _ in range(3):
        stand.recorder.publish(f"{PREFIX}/order", order)
    agent.send("sdk-move", SHORT, attempt=2)
    replay = agent.answer("sdk-move", lambda r: r.attempt == 2, "the replay")
    assert replay.replayed and replay.state == COMPLETED
    agent.send("sdk-dock", DOCK)
    assert agent.final("sdk-dock").state == COMPLETED
    assert stand.vehicle.executions("sdk-move") == 1
    assert stand.vehicle.executions("sdk-dock") == 1
    backend_orders = stand.recorder.of("order")
    for _ in range(3):
        backend_orders.remove(order)  # the test's copies
    for topic_name, payloads in (
        ("order", backend_orders),
        ("instantActions", stand.recorder.of("instantActions")),
    ):
        ids = [json.loads(p)["headerId"] for p in payloads]
        assert consecutive(ids), f"{topic_name}: {ids}"


def test_a_move_cancelled_at_the_vehicle_is_failed_with_the_reason(
    sdk_stand_of: Callable[..., SdkStand], agent_for: Callable[..., AgentUnderTest]
) -> None:
    stand = sdk_stand_of(node_delay=4.0)  # each node 4 s: time to cancel on the way
    agent = agent_for(stand)
    agent.send("sdk-cancel", SHORT)
    wait_until(
        lambda: any(e["event"] == "order_started" for e in stand.vehicle.effects()),
        "the vehicle to start the order",
    )
    stand.recorder.publish(
        f"{PREFIX}/instantActions",
        json.dumps(
            {
                "headerId": 0,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "version": "2.1.0",
                "manufacturer": MANUFACTURER,
                "serialNumber": SERIAL,
                "actions": [
                    {"actionId": "operator-1", "actionType": "cancelOrder", "blockingType": "NONE"}
                ],
            }
        ).encode(),
    )
    final = agent.final("sdk-cancel")
    assert final.state == FAILED, final
    assert "cancelled at the vehicle" in final.result_json, final
    assert stand.vehicle.executions("sdk-cancel") == 1


def test_a_vehicle_that_restarts_mid_order_leaves_the_key_interrupted_never_resent(
    sdk_stand_of: Callable[..., SdkStand], agent_for: Callable[..., AgentUnderTest]
) -> None:
    stand = sdk_stand_of(node_delay=4.0)
    agent = agent_for(stand)
    agent.send("sdk-forgot", SHORT)
    wait_until(
        lambda: stand.vehicle.executions("sdk-forgot") == 1, "the vehicle to start the order"
    )
    stand.restart_vehicle(kill=True)  # a new process: it knows no order
    final = agent.final("sdk-forgot", timeout_s=60.0)
    assert final.state == INTERRUPTED, final
    assert "restarted or dropped it" in final.message, final
    agent.spin_for(1.0)
    assert stand.vehicle.executions("sdk-forgot") == 1, "never sent to the new vehicle"
    agent.send("sdk-after", SHORT)
    assert agent.final("sdk-after").state == COMPLETED


def test_an_order_the_vehicle_refuses_is_rejected_with_its_reason_and_the_key_released(
    sdk_stand_of: Callable[..., SdkStand], agent_for: Callable[..., AgentUnderTest]
) -> None:
    stand = sdk_stand_of()
    # Orders on another map than the one the vehicle stands on: its start node is not where
    # the vehicle is (2.1 section 6.6.2, Figure 8), so the vehicle refuses them (orderError).
    agent = agent_for(stand, map_id="second-floor")
    agent.send("sdk-map", SHORT)
    refused = agent.answer("sdk-map", lambda r: r.state == REJECTED, "the refusal")
    assert refused.status_code == 400, refused
    assert "refused the order" in refused.message and "orderError" in refused.message, refused
    assert not agent.check_key("sdk-map").found, "released: nothing ran"
    assert stand.vehicle.executions("sdk-map") == 0
