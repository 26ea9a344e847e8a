"""A VDA 5050 vehicle nobody here wrote: the vehicle side of vda5050-sdk 0.2.0 (PyPI), its
``VehicleClient`` and ``OrderExecutor``, run as a process for tests.

``python test/support/sdk_vehicle.py --broker-host H --broker-port P --username U
--manufacturer M --serial-number S [--tls-ca FILE] [--effects-file FILE] ...`` (``--help``);
the password comes from the environment variable ``--password-env`` names, never from the
command line. Each side effect is one JSON line appended to ``--effects-file``: ``ready``
once connected and its first state published, ``order_started`` when an order's execution
begins, then ``order_finished``, ``order_cancelled`` or ``order_failed`` with
``last_node_id``. SIGTERM or SIGINT: OFFLINE through the SDK's disconnect, exit 0 (an order
cut short that way has no end line, as after SIGKILL). Tests start it with
:class:`SdkVehicle`.

Only wiring the SDK leaves to its user (0.2.0) is done here: ``on_order`` callbacks run in
the transport's read loop, so each order runs as a task (awaited there, it would hold back
a cancelOrder until the order's end); cancelOrder empties the state's route but leaves a
running executor driving, so the task is cancelled here; the SDK's transport ignores
``VehicleConfig.tls``, so a TLS broker gets :class:`TlsTransport`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiomqtt
from vda5050 import ExecutionState, VehicleClient, VehicleConfig
from vda5050.adapters.mqtt import AiomqttTransport
from vda5050.client.agv import OrderExecutor
from vda5050.model.factsheet import Factsheet
from vda5050.model.instant_actions import InstantActions
from vda5050.model.order import Order
from vda5050.ports.transport import Message

from fleet_idempotency.testing.agent_under_test import wait_until

SCRIPT = Path(__file__).resolve()
PASSWORD_ENV = "FLEET_IDEM_MQTT_PASSWORD"
DEFAULT_ACTIONS = ("pick", "drop", "dock", "startCharging")
# The instant actions VehicleClient carries out itself and this wiring completes.
SDK_INSTANT_ACTIONS = ("cancelOrder", "stateRequest", "factsheetRequest")
_log = logging.getLogger("sdk_vehicle")


# --- the vehicle process ---------------------------------------------------------------------
class TlsTransport(AiomqttTransport):
    """The SDK's MQTT transport over TLS, trusting ``ca_file``. Only the aiomqtt client is
    built here (the SDK's ``connect`` leaves TLS out whatever ``use_tls`` says); its
    subscriptions, read loop and publishing stay the SDK's."""

    def __init__(self, url: str, *, ca_file: Path, **kwargs: Any) -> None:
        super().__init__(url, use_tls=True, **kwargs)
        self._tls_context = ssl.create_default_context(cafile=str(ca_file))

    async def connect(self, *, will: Message | None = None) -> None:
        client = aiomqtt.Client(
            self._host,
            self._port,
            username=self._username,
            password=self._password,
            keepalive=self._keepalive,
            identifier=self._client_id,
            will=None
            if will is None
            else aiomqtt.Will(will.topic, will.payload, will.qos, will.retain),
            tls_context=self._tls_context,
        )
        await client.__aenter__()
        self._client = client
        self._subscribed.clear()
        for topic, _handler in list(self._subscriptions):
            await self._subscribe_topic(topic)
        self._reader_task = asyncio.create_task(self._read_loop(), name="vda5050-mqtt-reader")


class Effects:
    """The effects file: one JSON line per side effect, appended while a test reads it."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def write(self, **entry: Any) -> None:
        if self.path is not None:
            with self.path.open("a") as file:  # one write per line: never interleaved
                file.write(json.dumps(entry) + "\n")


class OrderRunner:
    """Each order the SDK accepted, driven by the SDK's ``OrderExecutor``, one at a time."""

    def __init__(self, client: VehicleClient, effects: Effects, args: argparse.Namespace) -> None:
        self._client = client
        self._effects = effects
        self._node_delay = args.node_delay
        self._action_delay = args.action_delay
        self._tasks: set[asyncio.Task[None]] = set()
        self._latest: asyncio.Task[None] | None = None
        self.stopping = False

    def on_order(self, order: Order) -> None:
        # Called in the transport's read loop: awaited there, the order would hold back
        # every later message, a cancelOrder too, until its end.
        task = asyncio.create_task(self._execute(order, after=self._latest))
        self._latest = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def on_instant_actions(self, message: InstantActions) -> None:
        # The SDK has emptied the route and failed the pending actions; its executor would
        # drive on to the order's end.
        if any(action.action_type == "cancelOrder" for action in message.actions):
            self.cancel_all()

    def cancel_all(self) -> list[asyncio.Task[None]]:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return tasks

    async def _execute(self, order: Order, *, after: asyncio.Task[None] | None) -> None:
        if after is not None:
            await asyncio.wait({after})  # an order update drives on from where its base ends
        executor = OrderExecutor(
            self._client.publisher, node_delay=self._node_delay, action_delay=self._action_delay
        )
        self._effects.write(
            event="order_started", order_id=order.order_id, order_update_id=order.order_update_id
        )
        try:
            outcome = await executor.run(order)
        except asyncio.CancelledError:
            if not self.stopping:
                self._end(order, "order_cancelled")
            raise
        except Exception:
            _log.exception("the SDK's executor failed on order %s", order.order_id)
            self._end(order, "order_failed")
            return
        self._end(
            order, "order_finished" if outcome is ExecutionState.COMPLETED else "order_failed"
        )

    def _end(self, order: Order, event: str) -> None:
        self._effects.write(
            event=event,
            order_id=order.order_id,
            order_update_id=order.order_update_id,
            last_node_id=self._client.publisher.last_node_id,
        )


def factsheet(args: argparse.Namespace) -> Factsheet:
    """What the schema requires, and the action lists (the SDK fills in the header)."""
    actions = [{"actionType": name, "actionScopes": ["NODE"]} for name in args.actions]
    actions += [{"actionType": name, "actionScopes": ["INSTANT"]} for name in SDK_INSTANT_ACTIONS]
    return Factsheet.model_validate(
        {
            "headerId": 0,
            "version": args.protocol_version,
            "manufacturer": args.manufacturer,
            "serialNumber": args.serial_number,
            "typeSpecification": {
                "seriesName": "vda5050-sdk OrderExecutor",
                "agvKinematic": "DIFF",
                "agvClass": "CARRIER",
                "maxLoadMass": 100,
                "localizationTypes": ["NATURAL"],
                "navigationTypes": ["AUTONOMOUS"],
            },
            "physicalParameters": {
                "speedMin": 0.0,
                "speedMax": 1.0,
                "accelerationMax": 1.0,
                "decelerationMax": 1.0,
                "heightMax": 1.0,
                "width": 1.0,
                "length": 1.0,
            },
            "protocolLimits": {
                "maxStringLens": {},
                "maxArrayLens": {},
                "timing": {
                    "minOrderInterval": 0.0,
                    "minStateInterval": 0.0,
                    "defaultStateInterval": args.state_interval,
                },
            },
            "protocolFeatures": {"optionalParameters": [], "agvActions": actions},
            "agvGeometry": {},
            "loadSpecification": {},
        }
    )


def vehicle_client(args: argparse.Namespace) -> VehicleClient:
    password = os.environ.get(args.password_env) or None
    config = VehicleConfig(
        manufacturer=args.manufacturer,
        serial_number=args.serial_number,
        broker_url=f"mqtt://{args.broker_host}:{args.broker_port}",
        username=args.username or None,
        password=password,
        protocol_version=args.protocol_version,
        state_interval=args.state_interval,
        keepalive=args.keepalive,
    )
    transport = None
    if args.tls_ca is not None:
        transport = TlsTransport(
            config.broker_url,
            ca_file=args.tls_ca,
            username=config.username,
            password=password,
            keepalive=config.keepalive,
        )
    return VehicleClient(config, transport=transport, factsheet_provider=lambda: factsheet(args))


async def run(args: argparse.Namespace) -> None:
    effects = Effects(args.effects_file)
    client = vehicle_client(args)
    runner = OrderRunner(client, effects, args)
    client.on_order(runner.on_order)
    client.on_instant_actions(runner.on_instant_actions)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await client.connect()
    if args.start_x is not None:
        client.update_position(x=args.start_x, y=args.start_y, theta=0.0, map_id=args.map_id)
    await client.publish_state()  # else the first state waits for --state-interval
    effects.write(event="ready")
    await stop.wait()
    runner.stopping = True
    await asyncio.gather(*runner.cancel_all(), return_exceptions=True)
    await client.disconnect()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="vda5050-sdk's vehicle, for tests")
    parser.add_argument("--broker-host", required=True)
    parser.add_argument("--broker-port", type=int, required=True)
    parser.add_argument("--username", default="")
    parser.add_argument("--password-env", default=PASSWORD_ENV)
    parser.add_argument("--tls-ca", type=Path, help="the CA file to trust: TLS on")
    parser.add_argument("--manufacturer", required=True)
    parser.add_argument("--serial-number", required=True)
    parser.add_argument("--protocol-version", default="2.1.0")
    parser.add_argument("--start-x", type=float)
    parser.add_argument("--start-y", type=float)
    parser.add_argument("--map-id", default="map")
    parser.add_argument("--node-delay", type=float, default=0.2)
    parser.add_argument("--action-delay", type=float, default=0.2)
    parser.add_argument("--state-interval", type=float, default=1.0)
    parser.add_argument("--keepalive", type=int, default=15, help="s; the last will's delay")
    parser.add_argument(
        "--actions", type=lambda text: [a for a in text.split(",") if a], default=DEFAULT_ACTIONS
    )
    parser.add_argument("--effects-file", type=Path)
    args = parser.parse_args(argv)
    if (args.start_x is None) != (args.start_y is None):
        parser.error("give both --start-x and --start-y, or neither")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(run(parse_args(argv)))
    return 0


# --- the test side ---------------------------------------------------------------------------
class SdkVehicle:
    """The script above as a child process. ``start()`` returns at once; ``wait_ready``
    waits for its connection and first state. ``password`` reaches the child through the
    environment (``env`` plus that variable), never its command line."""

    def __init__(
        self,
        *,
        broker_host: str,
        broker_port: int,
        manufacturer: str,
        serial_number: str,
        log_file: Path,
        effects_file: Path | None = None,
        env: Mapping[str, str] | None = None,
        username: str = "",
        password: str = "",
        tls_ca: Path | None = None,
        start: tuple[float, float] | None = None,
        map_id: str = "map",
        node_delay: float = 0.2,
        action_delay: float = 0.2,
        state_interval: float = 1.0,
        keepalive: int = 15,
        actions: Sequence[str] = DEFAULT_ACTIONS,
        protocol_version: str = "2.1.0",
    ) -> None:
        self.log_file = log_file
        self.effects_file = effects_file or log_file.with_name(log_file.stem + ".effects.jsonl")
        self.env = {**(os.environ if env is None else env), PASSWORD_ENV: password}
        self.argv = [
            sys.executable, str(SCRIPT),
            "--broker-host", broker_host, "--broker-port", str(broker_port),
            "--username", username, "--password-env", PASSWORD_ENV,
            "--manufacturer", manufacturer, "--serial-number", serial_number,
            "--protocol-version", protocol_version, "--map-id", map_id,
            "--node-delay", str(node_delay), "--action-delay", str(action_delay),
            "--state-interval", str(state_interval), "--keepalive", str(keepalive),
            "--actions", ",".join(actions), "--effects-file", str(self.effects_file),
        ]  # fmt: skip
        if tls_ca is not None:
            self.argv += ["--tls-ca", str(tls_ca)]
        if start is not None:
            self.argv += ["--start-x", str(start[0]), "--start-y", str(start[1])]
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        with self.log_file.open("ab") as log:
            self._process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C is the test's to forward
            )
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def effects(self) -> list[dict[str, Any]]:
        """Every complete line of the effects file (a line being written is left out)."""
        try:
            text = self.effects_file.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def executions(self, order_id: str) -> int:
        """How many times an order (an order update counts again) began to be driven."""
        return sum(
            1
            for e in self.effects()
            if e["event"] == "order_started" and e.get("order_id") == order_id
        )

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        wait_until(
            lambda: not self.running or any(e["event"] == "ready" for e in self.effects()),
            "the SDK vehicle to connect and publish its first state",
            timeout_s=timeout_s,
        )
        if not self.running:
            raise RuntimeError(f"the SDK vehicle exited: {self.log()[-2000:]}")

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM (OFFLINE, exit 0 expected), then SIGKILL after ``timeout_s``; the exit code."""
        return self._end(signal.SIGTERM, timeout_s)

    def kill(self) -> int | None:
        """SIGKILL: a crash; the broker publishes the vehicle's last will (CONNECTIONBROKEN)."""
        return self._end(signal.SIGKILL, 10.0)

    def _end(self, signum: signal.Signals, timeout_s: float) -> int | None:
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signum)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_file.read_text(errors="replace")
        return ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
