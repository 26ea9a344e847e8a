"""The throwaway MQTT broker the VDA 5050 tests, benches and demo start (Debian's
mosquitto on a free port, a configuration and password file of its own, TLS optional)."""

from __future__ import annotations

import ssl
import threading
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.bringup.mosquitto import (
    LocalMosquitto,
    mosquitto_available,
    tls_available,
)

pytestmark = pytest.mark.skipif(
    not mosquitto_available(),
    reason="Debian's mosquitto is not installed (scripts/setup.sh --test installs it)",
)


needs_openssl = pytest.mark.skipif(
    not tls_available(), reason="Debian's openssl is not installed (it makes the test CA)"
)


def _client(username: str | None, password: str | None, tls: ssl.SSLContext | None) -> Any:
    from paho.mqtt.client import Client
    from paho.mqtt.enums import CallbackAPIVersion

    client = Client(CallbackAPIVersion.VERSION2, client_id="probe")
    if username is not None:
        client.username_pw_set(username, password)
    if tls is not None:
        client.tls_set_context(tls)
    return client


def _trusting(ca_file: Path | None) -> ssl.SSLContext:
    """A client's TLS context: hostname and chain checked, ``ca_file`` trusted."""
    return ssl.create_default_context(cafile=None if ca_file is None else str(ca_file))


def _connect(
    port: int,
    username: str | None,
    password: str | None,
    *,
    tls: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
) -> int:
    """The CONNACK reason code a client gets (0: accepted)."""
    answered = threading.Event()
    codes: list[int] = []
    client = _client(username, password, tls)

    def on_connect(_c: object, _u: object, _f: object, reason: object, _p: object) -> None:
        codes.append(int(getattr(reason, "value", reason)))  # type: ignore[call-overload]
        answered.set()

    client.on_connect = on_connect
    client.connect(host, port, keepalive=10)
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


def _round_trip(port: int, username: str, password: str, tls: ssl.SSLContext) -> bytes:
    """What comes back of one message published to a topic the same client subscribed to."""
    subscribed, received = threading.Event(), threading.Event()
    payloads: list[bytes] = []
    client = _client(username, password, tls)
    client.on_connect = lambda c, *_: c.subscribe("fleet-idem/probe", 1)
    client.on_subscribe = lambda *_: subscribed.set()

    def on_message(_c: object, _u: object, message: Any) -> None:
        payloads.append(bytes(message.payload))
        received.set()

    client.on_message = on_message
    client.connect("127.0.0.1", port, keepalive=10)
    client.loop_start()
    try:
        assert subscribed.wait(10), "no SUBACK over TLS"
        client.publish("fleet-idem/probe", b"over tls", qos=1)
        assert received.wait(10), "the message did not come back"
    finally:
        client.disconnect()
        client.loop_stop()
    return payloads[0]


@needs_openssl
def test_a_tls_broker_serves_clients_that_trust_its_ca_and_know_the_password() -> None:
    with LocalMosquitto(username="fleet", password="s3cret", tls=True) as broker:
        assert broker.ca_file is not None and broker.ca_file.is_file()
        trusting = _trusting(broker.ca_file)
        assert _round_trip(broker.port, "fleet", "s3cret", trusting) == b"over tls"
        # The certificate names both loopback spellings a client may be configured with.
        assert _connect(broker.port, "fleet", "s3cret", tls=trusting, host="localhost") == 0
        assert _connect(broker.port, "fleet", "wrong", tls=trusting) != 0
        port = broker.port
        broker.restart(kill=True)
        assert broker.port == port
        assert _round_trip(broker.port, "fleet", "s3cret", trusting) == b"over tls"


@needs_openssl
def test_a_tls_broker_refuses_plain_tcp_clients() -> None:
    with LocalMosquitto(username="fleet", password="s3cret", tls=True) as broker:
        connected, dropped = threading.Event(), threading.Event()
        client = _client("fleet", "s3cret", tls=None)
        client.on_connect = lambda *_: connected.set()
        client.on_disconnect = lambda *_: dropped.set()
        client.connect(broker.host, broker.port, keepalive=10)  # TCP itself is accepted
        client.loop_start()
        try:
            assert dropped.wait(10), "a plain MQTT CONNECT was neither answered nor dropped"
            assert not connected.is_set()
        finally:
            client.disconnect()
            client.loop_stop()


@needs_openssl
def test_a_tls_broker_is_refused_by_clients_that_do_not_trust_its_ca() -> None:
    with LocalMosquitto(username="fleet", password="s3cret", tls=True) as broker:
        client = _client("fleet", "s3cret", _trusting(None))  # the system's CAs only
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            client.connect(broker.host, broker.port, keepalive=10)
