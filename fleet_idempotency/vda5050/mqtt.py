"""An MQTT client for one VDA 5050 participant: paho-mqtt 2.x, connected in the background,
reconnecting for ever, re-subscribing after each reconnection.

Credentials and TLS are configuration (``BrokerSettings``); the broker's security is the
broker's (VDA 5050 2.1 section 6.2). Callbacks run on paho's network thread: keep them
short and never let them raise (``on_message`` errors are caught and counted here).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from paho.mqtt.client import Client, MQTTMessage
from paho.mqtt.enums import CallbackAPIVersion
from pydantic import BaseModel, ConfigDict, Field, model_validator

MessageHandler = Callable[[str, bytes], None]


class BrokerSettings(BaseModel):
    """Where the broker is and how to log in (a password-protected broker, TLS optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    broker_host: str = "127.0.0.1"
    broker_port: int = Field(default=1883, ge=1, le=65535)
    username: str = ""
    password: str = ""
    # The name of an environment variable holding the password instead: keeps it out of
    # the fleet file and off command lines (``ps`` shows those). ``password`` wins if set.
    password_env: str = ""
    # TLS: a CA file turns TLS on; a client certificate and key are optional.
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # The broker notices a dead client after 1.5 keep-alive periods (its last will).
    keepalive_s: int = Field(default=10, ge=2, le=600)

    @model_validator(mode="after")
    def _password_env_is_set(self) -> BrokerSettings:
        if self.password_env and not self.password and self.password_env not in os.environ:
            raise ValueError(f"password_env: environment variable {self.password_env} is not set")
        return self

    def secret(self) -> str:
        """The password: ``password``, else the variable ``password_env`` names."""
        if self.password or not self.password_env:
            return self.password
        return os.environ.get(self.password_env, "")


class MqttLink:
    """One paho client. ``will``: (topic, payload, qos, retain) published by the broker if
    this client dies; ``on_connect``: called after each (re)connection and re-subscription."""

    def __init__(
        self,
        settings: BrokerSettings,
        client_id: str,
        *,
        on_message: MessageHandler,
        on_connect: Callable[[], None] = lambda: None,
        on_disconnect: Callable[[], None] = lambda: None,
        will: tuple[str, bytes, int, bool] | None = None,
    ) -> None:
        self.settings = settings
        self.counters: Counter[str] = Counter()
        self._on_message = on_message
        self._on_connect = on_connect
        self._on_disconnect = on_disconnect
        self._subscriptions: dict[str, int] = {}
        self._connected = threading.Event()
        self._lock = threading.Lock()
        self.client = Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
        if settings.username:
            self.client.username_pw_set(settings.username, settings.secret())
        if settings.tls_ca_file:
            self.client.tls_set(
                ca_certs=settings.tls_ca_file,
                certfile=settings.tls_cert_file or None,
                keyfile=settings.tls_key_file or None,
            )
        if will is not None:
            self.client.will_set(will[0], will[1], qos=will[2], retain=will[3])
        self.client.reconnect_delay_set(min_delay=1, max_delay=2)
        self.client.on_connect = self._connected_cb
        self.client.on_disconnect = self._disconnected_cb
        self.client.on_message = self._message_cb

    # --- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Connect in the background (a broker that is not up yet is waited for)."""
        self.client.connect_async(
            self.settings.broker_host,
            self.settings.broker_port,
            keepalive=self.settings.keepalive_s,
        )
        self.client.loop_start()

    def stop(self, *, last_words: tuple[str, bytes, int, bool] | None = None) -> None:
        """Disconnect cleanly (``last_words`` published first if connected), stop the thread."""
        if last_words is not None and self.connected:
            info = self.client.publish(
                last_words[0], last_words[1], qos=last_words[2], retain=last_words[3]
            )
            info.wait_for_publish(timeout=2.0)
        self.client.disconnect()
        self.client.loop_stop()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_connected(self, timeout_s: float) -> bool:
        return self._connected.wait(timeout_s)

    def subscribe(self, topic: str, qos: int = 0) -> None:
        with self._lock:
            self._subscriptions[topic] = qos
        if self.connected:
            self.client.subscribe(topic, qos)

    def publish(self, topic: str, payload: bytes, *, qos: int = 0, retain: bool = False) -> bool:
        """Hand ``payload`` to the client; False if not connected (QoS 0 is not queued)."""
        if not self.connected:
            self.counters["publish_while_disconnected"] += 1
            return False
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        return bool(info.rc == 0)

    # --- paho callbacks (network thread) ----------------------------------------------------
    def _connected_cb(self, _c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if getattr(reason, "is_failure", False):
            self.counters["connect_refused"] += 1
            return
        with self._lock:
            subscriptions = list(self._subscriptions.items())
        for topic, qos in subscriptions:
            self.client.subscribe(topic, qos)
        self._connected.set()
        self.counters["connects"] += 1
        self._guarded(self._on_connect)

    def _disconnected_cb(self, _c: Any, _u: Any, _f: Any, _reason: Any, _p: Any) -> None:
        was = self._connected.is_set()
        self._connected.clear()
        if was:
            self.counters["disconnects"] += 1
            self._guarded(self._on_disconnect)

    def _message_cb(self, _c: Any, _u: Any, message: MQTTMessage) -> None:
        self._guarded(lambda: self._on_message(message.topic, bytes(message.payload)))

    def _guarded(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:  # a handler's bug must not kill paho's network thread
            self.counters["handler_errors"] += 1
