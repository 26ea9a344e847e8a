"""A VDA 5050 stand for tests: a real password-protected Mosquitto, the world simulator,
a simulated vehicle process, and a recorder of every message on the broker (each one
checked against the official VDA 5050 JSON schemas that vda5050-sdk bundles)."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.bringup.mosquitto import LocalMosquitto, mosquitto_available
from fleet_idempotency.testing.agent_under_test import wait_until
from fleet_idempotency.vda5050.wire import major_version_of

from support.fleet_harness import BIN
from support.paths import FLEET_FILE
from support.ros_support import ChildProcesses
from support.world_oracle import WorldOracle

USERNAME, PASSWORD = "fleet", "vda-s3cret"
MANUFACTURER = "fleet-idem"
needs_mosquitto = pytest.mark.skipif(
    not mosquitto_available(),
    reason="Debian's mosquitto is not installed (scripts/setup.sh --test installs it)",
)


def official_schemas() -> Path:
    """The official VDA 5050 JSON schemas, as the installed vda5050-sdk bundles them."""
    folder = Path(str(files("vda5050.validation") / "schemas"))
    assert (folder / "order.json").is_file(), f"no schemas in {folder}"
    return folder


class SchemaCheck:
    def __init__(self) -> None:
        from jsonschema import Draft202012Validator, FormatChecker

        folder = official_schemas()
        self.validators = {
            name: Draft202012Validator(
                json.loads((folder / f"{name}.json").read_text()), format_checker=FormatChecker()
            )
            for name in ("order", "instantActions", "state", "connection", "factsheet")
        }

    def errors(self, topic_name: str, message: dict[str, Any]) -> list[str]:
        validator = self.validators[topic_name]
        return [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(message)
        ]


class Recorder:
    """Every message published on the vehicle's topics (an MQTT client of its own)."""

    def __init__(self, broker: LocalMosquitto, prefix: str, password: str = PASSWORD) -> None:
        import ssl

        from paho.mqtt.client import Client, MQTTMessage
        from paho.mqtt.enums import CallbackAPIVersion

        self.messages: list[tuple[float, str, bytes]] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = Client(CallbackAPIVersion.VERSION2, client_id="recorder")
        self.client.username_pw_set(USERNAME, password)
        if broker.ca_file is not None:
            self.client.tls_set_context(ssl.create_default_context(cafile=str(broker.ca_file)))

        def on_connect(*_args: Any) -> None:
            self.client.subscribe(f"{prefix}/#", 1)
            self._subscribed.set()

        def on_message(_c: Any, _u: Any, message: MQTTMessage) -> None:
            with self._lock:
                self.messages.append((time.monotonic(), message.topic, bytes(message.payload)))

        self.client.on_connect = on_connect
        self.client.on_message = on_message
        self.client.reconnect_delay_set(1, 1)
        self.client.connect_async(broker.host, broker.port, keepalive=5)
        self.client.loop_start()
        assert self._subscribed.wait(10)

    def of(self, topic_name: str) -> list[bytes]:
        with self._lock:
            return [p for _t, topic, p in self.messages if topic.endswith("/" + topic_name)]

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        self.client.publish(topic, payload, qos=qos, retain=retain).wait_for_publish(5)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@dataclass
class Vda5050Stand:
    broker: LocalMosquitto
    children: ChildProcesses
    env: dict[str, str]
    oracle: WorldOracle
    recorder: Recorder
    robot_id: str
    serial: str
    robot_type: str = "amr"
    time_scale: float = 0.1
    start: tuple[float, float] = (0.0, 0.5)
    vehicle_boots: int = 0
    schemas: SchemaCheck = field(default_factory=SchemaCheck)
    state_period_s: float = 0.5
    protocol_version: str = "2.1.0"
    vehicle_options: tuple[str, ...] = ()

    @property
    def prefix(self) -> str:
        return f"uagv/{major_version_of(self.protocol_version)}/{MANUFACTURER}/{self.serial}"

    def backend_params(self, **extra: Any) -> dict[str, Any]:
        return {
            "broker_host": self.broker.host,
            "broker_port": self.broker.port,
            "username": USERNAME,
            "password": PASSWORD,
            "manufacturer": MANUFACTURER,
            "serial_number": self.serial,
            "fleet_file": str(FLEET_FILE),
            "resend_period_s": 0.3,
            "request_period_s": 0.5,
            "keepalive_s": 4,
            "protocol_version": self.protocol_version,
            **extra,
        }

    def start_vehicle(self, *, wait_online: bool = True) -> None:
        self.vehicle_boots += 1
        self.children.spawn(
            f"vehicle-{self.vehicle_boots}",
            [
                str(BIN / "vda5050_vehicle"),
                "--robot-id",
                self.robot_id,
                "--robot-type",
                self.robot_type,
                "--manufacturer",
                MANUFACTURER,
                "--serial-number",
                self.serial,
                "--broker-host",
                self.broker.host,
                "--broker-port",
                str(self.broker.port),
                "--username",
                USERNAME,
                "--time-scale",
                str(self.time_scale),
                "--state-period",
                str(self.state_period_s),
                "--protocol-version",
                self.protocol_version,
                *self.vehicle_options,
                "--keepalive",
                "2",
                "--start-x",
                str(self.start[0]),
                "--start-y",
                str(self.start[1]),
            ],
            {**self.env, "FLEET_IDEM_MQTT_PASSWORD": PASSWORD},
        )
        if wait_online:
            seen = len(self.recorder.of("connection"))
            wait_until(
                lambda: any(
                    json.loads(p)["connectionState"] == "ONLINE"
                    for p in self.recorder.of("connection")[seen:]
                ),
                "the vehicle to come ONLINE",
                timeout_s=60,
            )

    def kill_vehicle(self, sig: signal.Signals = signal.SIGKILL) -> None:
        self.children.kill(f"vehicle-{self.vehicle_boots}", sig)

    def faults(self, **faults: Any) -> None:
        self.recorder.publish(
            f"fleet_idem_sim/{MANUFACTURER}/{self.serial}/faults", json.dumps(faults).encode(), 1
        )

    def side_effects(self, key: str) -> int:
        return self.oracle.side_effects(self.robot_id, key)

    def latest_state(self) -> dict[str, Any] | None:
        states = self.recorder.of("state")
        return json.loads(states[-1]) if states else None

    def wait_state(self, condition: Callable[[dict[str, Any]], bool], what: str) -> None:
        wait_until(lambda: (s := self.latest_state()) is not None and condition(s), what)

    def assert_every_message_matches_the_official_schemas(self) -> int:
        """Every message the backend and the vehicle published; how many were checked. The
        official schemas here are 2.1's (vda5050-sdk bundles no others; no registry carries
        3.0's): a 3.0 stand's messages are not checked."""
        if not self.protocol_version.startswith("2"):
            return 0
        checked, problems = 0, []
        for name in ("order", "instantActions", "state", "connection", "factsheet"):
            # A zero-length payload is MQTT's deletion of a retained message, not a message.
            for payload in filter(None, self.recorder.of(name)):
                errors = self.schemas.errors(name, json.loads(payload))
                checked += 1
                if errors:
                    problems.append(f"{name}: {errors[:3]} in {payload[:300]!r}")
        assert not problems, "\n".join(problems[:10])
        return checked


def make_stand(
    tmp_path: Path, env: dict[str, str], context: Any, *, robot_id: str, serial: str, **kw: Any
) -> tuple[Vda5050Stand, Callable[[], None]]:
    broker = LocalMosquitto(username=USERNAME, password=PASSWORD).start()
    children = ChildProcesses(tmp_path)
    children.spawn(
        "world",
        [str(BIN / "world_simulator"), "--ros-args", "-p", f"fleet_file:={FLEET_FILE}"],
        env,
    )
    oracle = WorldOracle(context)
    major = major_version_of(kw.get("protocol_version", "2.1.0"))
    recorder = Recorder(broker, f"uagv/{major}/{MANUFACTURER}/{serial}")
    stand = Vda5050Stand(broker, children, env, oracle, recorder, robot_id, serial, **kw)

    def close() -> None:
        recorder.close()
        oracle.close()
        children.stop_all()
        broker.close()

    try:
        oracle.wait_ready()
        stand.start_vehicle()
    except BaseException:
        close()
        raise
    return stand, close
