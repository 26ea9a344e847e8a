"""The throwaway MQTT broker the VDA 5050 tests, benches and demo start (Debian's
mosquitto on a free port, a configuration and password file of its own)."""

from __future__ import annotations

import threading

import pytest

from fleet_idempotency.bringup.mosquitto import LocalMosquitto, mosquitto_available

pytestmark = pytest.mark.skipif(
    not mosquitto_available(),
    reason="Debian's mosquitto is not installed (scripts/setup.sh --test installs it)",
)


def _connect(port: int, username: str | None, password: str | None) -> int:
    """The CONNACK reason code a client gets (0: accepted)."""
    from paho.mqtt.client import Client
    from paho.mqtt.enums import CallbackAPIVersion

    answered = threading.Event()
    codes: list[int] = []
    client = Client(CallbackAPIVersion.VERSION2, client_id="probe")
    if username is not None:
        client.username_pw_set(username, password)

    def on_connect(_c: object, _u: object, _f: object, reason: object, _p: object) -> None:
        codes.append(int(getattr(reason, "value", reason)))  # type: ignore[call-overload]
        answered.set()

    client.on_connect = on_connect
    client.connect("127.0.0.1", port, keepalive=10)
    client.loop_start()
    try:
        assert answered.wait(10), "no CONNACK"
    finally:
        client.disconnect()
        client.loop_stop()
    return codes[0]


def test_a_password_protected_broker_refuses_strangers_and_keeps_its_port_across_a_restart() -> (
    None
):
    broker = LocalMosquitto(username="fleet", password="s3cret")
    with broker:
        assert broker.running and broker.port > 0
        assert _connect(broker.port, "fleet", "s3cret") == 0
        assert _connect(broker.port, "fleet", "wrong") != 0
        assert _connect(broker.port, None, None) != 0
        port = broker.port
        broker.restart(kill=True)
        assert broker.port == port and broker.running
        assert _connect(broker.port, "fleet", "s3cret") == 0
    assert not broker.running
    assert not broker.root.exists()


def test_credentials_come_in_pairs() -> None:
    with pytest.raises(ValueError, match="both"):
        LocalMosquitto(username="fleet")
