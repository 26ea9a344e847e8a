"""fleet-idem: run a simulated fleet without ros2 launch, and talk to it.

    fleet-idem demo [--commands 400] [--speed 20] [--no-faults] [--host-agents] [--no-http]
    fleet-idem up [--fleet FILE] [--store-dir DIR] [--speed 20] [--no-http] [--http-port N]
    fleet-idem submit --robot amr_1 --type dock --payload '{"dock": "D1"}' [--key K] [--wait 30]
    fleet-idem check --key K [--client wms]

``up`` prints the ROS_DOMAIN_ID its fleet uses; ``submit`` and ``check`` join the domain
in ROS_DOMAIN_ID, like every ROS 2 tool.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from types import FrameType

import rclpy
import yaml

from fleet_idempotency.auth import FleetKeyring, KeyringError
from fleet_idempotency.bringup.demo import Demo, DemoOptions
from fleet_idempotency.bringup.keys import fleet_keyring_path, provision, update
from fleet_idempotency.bringup.mosquitto import LocalMosquitto
from fleet_idempotency.bringup.plan import (
    PASSWORD_VARIABLE,
    http_url,
    launch_plan,
    system_tools_needed,
    time_scale_for_speed,
    vda5050_robots,
    with_broker,
)
from fleet_idempotency.bringup.processes import FleetProcesses
from fleet_idempotency.bringup.system_tools import (
    MissingSystemTool,
    SystemTool,
    ensure_installed,
)
from fleet_idempotency.description.fleet import FleetConfig, FleetConfigError, load_fleet
from fleet_idempotency.description.resources import default_demo_fleet_file, default_fleet_file
from fleet_idempotency.http.ports import PortLease
from fleet_idempotency.protocol import EXIT_STARTUP_ERROR
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id
from fleet_idempotency.ros.fleet_client import FleetClient, NoAnswer


def _fleet_argument(parser: argparse.ArgumentParser, default_fleet: str = "fleet.yaml") -> None:
    parser.add_argument(
        "--fleet",
        type=Path,
        default=None,
        help=f"fleet description YAML (default: the package's config/{default_fleet})",
    )
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="where stores and logs go (default: a new temporary directory)",
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=None,
        help="simulated-time speed-up (default: the fleet file's time scale)",
    )
    parser.add_argument("--no-http", action="store_true", help="do not start the HTTP API")
    parser.add_argument(
        "--http-port", type=int, default=None, help="HTTP API port (default: the fleet file's)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleet-idem", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="run a mission with injected faults, then report")
    _fleet_argument(demo, "fleet_mixed.yaml: 2 of its 6 robots VDA 5050 vehicles over MQTT")
    demo.add_argument("--commands", type=int, default=400)
    demo.add_argument("--no-faults", action="store_true", help="a clean run: no faults at all")
    demo.add_argument(
        "--drop-results",
        type=float,
        default=0.2,
        help="fraction of robot results lost on the way back",
    )
    demo.add_argument(
        "--duplicate-deliveries",
        type=float,
        default=0.1,
        help="fraction of deliveries to robots sent twice",
    )
    demo.add_argument(
        "--reordered-deliveries",
        type=float,
        default=0.1,
        help="fraction of deliveries held back and sent after newer ones",
    )
    demo.add_argument(
        "--client-retries",
        type=float,
        default=0.1,
        help="fraction of finished commands the client submits again",
    )
    demo.add_argument("--robot-crashes", type=int, default=2)
    demo.add_argument("--orchestrator-crashes", type=int, default=1)
    demo.add_argument(
        "--vehicle-crashes",
        type=int,
        default=1,
        help="kill -9s of simulated VDA 5050 vehicles (they forget their order)",
    )
    demo.add_argument(
        "--broker-restarts", type=int, default=1, help="MQTT broker kill -9s (same port)"
    )
    demo.add_argument(
        "--drop-orders",
        type=float,
        default=0.2,
        help="fraction of VDA 5050 commands after which the next order publish is lost",
    )
    demo.add_argument(
        "--host-agents",
        action="store_true",
        help="host all agents in one process (each keeps its own store)",
    )
    demo.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="orchestrator replicas sharing PostgreSQL; the orchestrator crashes kill the "
        "lease holder (default 1: a lone orchestrator on LMDB)",
    )
    demo.add_argument(
        "--store-url",
        default=None,
        help="postgresql:// database the replicas share (default with --replicas > 1: a "
        "throwaway local PostgreSQL server the demo starts and removes)",
    )
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--keep-store", action="store_true")

    up = commands.add_parser("up", help="start a fleet and keep it running until Ctrl-C")
    _fleet_argument(up)
    up.add_argument("--host-agents", action="store_true")
    up.add_argument(
        "--no-auth", action="store_true", help="do not sign commands (robots accept any sender)"
    )

    keys = commands.add_parser("keys", help="create and rotate the fleet's command keyrings")
    keys.add_argument("action", choices=["init", "add", "activate", "retire", "show"])
    keys.add_argument("--dir", type=Path, required=True, help="keyring directory")
    keys.add_argument("--id", default=None, help="key id (add, activate, retire)")
    keys.add_argument("--activate", action="store_true", help="with add: sign with it at once")
    keys.add_argument(
        "--fleet",
        type=Path,
        default=None,
        help="fleet description YAML (default: the package's config/fleet.yaml)",
    )

    submit = commands.add_parser("submit", help="submit one command through the orchestrator")
    submit.add_argument("--client", default="cli")
    submit.add_argument("--key", default=None, help="idempotency key (default: a new UUID)")
    submit.add_argument("--robot", required=True)
    submit.add_argument("--type", required=True, dest="command_type")
    submit.add_argument("--payload", default="{}")
    submit.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds to wait for the final result (0: answer at once)",
    )
    submit.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="give up after this many seconds without an answer, re-sends included "
        "(default: --wait + 30)",
    )

    check = commands.add_parser("check", help="status check of a key (reconciliation)")
    check.add_argument("--client", default="cli")
    check.add_argument("--key", required=True)
    return parser


def _raise_keyboard_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    # SIGTERM (e.g. from CI or systemd) cleans up like Ctrl-C: no process left behind.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    # Python installs its Ctrl-C handler only when SIGINT is not ignored at start, and a
    # process started in the background of a script inherits "ignored": `kill -INT` must
    # still stop the fleet cleanly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # Before anything starts: a missing broker or database is one line, not a traceback.
        ensure_installed(system_tools_of(options))
        if options.command == "demo":
            return _demo(options)
        if options.command == "keys":
            return _keys(options)
        if options.command == "up":
            return _up(options)
        return _client_command(options)
    except FleetConfigError as error:
        print(f"fleet-idem: {error}", file=sys.stderr)
        return 2
    except MissingSystemTool as error:
        print(f"fleet-idem {options.command}: {error}", file=sys.stderr)
        return EXIT_STARTUP_ERROR
    except KeyboardInterrupt:
        print("fleet-idem: interrupted; every process it started has been stopped", file=sys.stderr)
        return 130


def system_tools_of(options: argparse.Namespace) -> list[SystemTool]:
    """The programs from Debian packages that this command starts beside the fleet."""
    if options.command == "demo":
        return system_tools_needed(
            load_fleet(options.fleet or default_demo_fleet_file()),
            local_database=options.replicas > 1 and options.store_url is None,
        )
    if options.command == "up":
        return system_tools_needed(
            load_fleet(options.fleet or default_fleet_file()), local_database=False
        )
    return []


def _demo(options: argparse.Namespace) -> int:
    demo = Demo(
        DemoOptions(
            fleet_file=options.fleet or default_demo_fleet_file(),
            commands=options.commands,
            store_dir=options.store_dir,
            time_scale=time_scale_for_speed(options.speed),
            host_agents=options.host_agents,
            faults=not options.no_faults,
            drop_results=options.drop_results,
            duplicate_deliveries=options.duplicate_deliveries,
            reordered_deliveries=options.reordered_deliveries,
            client_retries=options.client_retries,
            robot_crashes=options.robot_crashes,
            orchestrator_crashes=options.orchestrator_crashes,
            vehicle_crashes=options.vehicle_crashes,
            broker_restarts=options.broker_restarts,
            drop_orders=options.drop_orders,
            seed=options.seed,
            keep_store=options.keep_store,
            http=not options.no_http,
            http_port=options.http_port,
            replicas=options.replicas,
            store_url=options.store_url,
        ),
        out=lambda line: print(line, flush=True),
    )
    return demo.run()


def _up(options: argparse.Namespace) -> int:
    fleet_file = options.fleet or default_fleet_file()
    fleet = load_fleet(fleet_file)
    store_dir = options.store_dir or Path(tempfile.mkdtemp(prefix="fleet-idem-up-"))
    with (
        contextlib.ExitStack() as stack,
        lease_domain_id() as domain_id,
        PortLease(
            fleet.http.host,
            options.http_port or fleet.http.port,
            exact=options.http_port is not None,
        ) as http_port,
    ):
        env = isolated_environment(domain_id)
        if vda5050_robots(fleet):
            fleet_file, fleet = _with_local_broker(stack, fleet, store_dir, env)
        processes = FleetProcesses(
            store_dir / "logs",
            env,
            on_restart=lambda restart: print(
                f"supervisor: {restart.name} exited (code {restart.exit_code}); restarted "
                f"after {restart.delay_s:.1f} s (restart #{restart.count}); its log: "
                f"{store_dir / 'logs' / (restart.name + '.log')}",
                flush=True,
            ),
            on_give_up=lambda name: print(
                f"supervisor: {name} cannot start (exit code {EXIT_STARTUP_ERROR}) and is not "
                f"restarted; its log: {store_dir / 'logs' / (name + '.log')}",
                flush=True,
            ),
        )
        try:
            keyring_dir = None if options.no_auth else store_dir / "keys"
            if keyring_dir is not None:
                provision(fleet, keyring_dir)
            plan = launch_plan(
                fleet,
                fleet_file=Path(fleet_file),
                store_dir=store_dir,
                time_scale=time_scale_for_speed(options.speed),
                keyring_dir=keyring_dir,
                with_http=not options.no_http,
                http_port=http_port.port,
            )
            processes.start_plan(
                plan,
                fleet_file=Path(fleet_file),
                store_dir=store_dir,
                host_agents=options.host_agents,
                keyring_dir=keyring_dir,
            )
            print(
                f"commands authenticated with keyrings in {keyring_dir} (rotate with "
                f"`fleet-idem keys add --dir {keyring_dir}`)"
                if keyring_dir is not None
                else "commands NOT authenticated (--no-auth): any DDS participant may command"
            )
            print(
                f"fleet up: {len(fleet.robots)} robots ({', '.join(r.id for r in fleet.robots)})"
                f"; stores and logs in {store_dir}"
            )
            url = http_url(plan, fleet)
            if url:
                print(f"HTTP API and fleet page: {url} (OpenAPI: {url}docs)")
            print("in another shell:")
            print(f"  export ROS_DOMAIN_ID={domain_id} ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST")
            print('  fleet-idem submit --robot amr_1 --type dock --payload \'{"dock": "D1"}\'')
            print("  fleet-idem check --key <key printed by submit>")
            print("Ctrl-C stops the fleet.", flush=True)
            threading.Event().wait()  # until Ctrl-C or SIGTERM
        finally:
            processes.stop_all()
    return 0


def _with_local_broker(
    stack: contextlib.ExitStack, fleet: FleetConfig, store_dir: Path, env: dict[str, str]
) -> tuple[Path, FleetConfig]:
    """Start a throwaway password-protected Mosquitto for the fleet's VDA 5050 robots
    (stopped when ``stack`` closes); the password goes into ``env`` and a 0600 file, the
    broker's address into the fleet file the processes read, written to ``store_dir``."""
    broker = stack.enter_context(LocalMosquitto(username="fleet", password=secrets.token_hex(16)))
    env[PASSWORD_VARIABLE] = broker.password
    fleet = with_broker(
        fleet, broker.host, broker.port, username=broker.username, password_env=PASSWORD_VARIABLE
    )
    store_dir.mkdir(parents=True, exist_ok=True)
    password_file = store_dir / "mqtt_password"
    password_file.touch(mode=0o600)
    password_file.write_text(broker.password + "\n")
    fleet_file = store_dir / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet.model_dump(mode="json"), sort_keys=False))
    print(
        f"MQTT broker: mosquitto on {broker.host}:{broker.port}, user {broker.username}, "
        f"password in {password_file}; VDA 5050 robots "
        f"{', '.join(r.id for r in vda5050_robots(fleet))} with a simulated vehicle each",
        flush=True,
    )
    return fleet_file, fleet


def _keys(options: argparse.Namespace) -> int:
    """Rotation: ``add`` (robots learn the new key), ``activate`` (the orchestrator signs with
    it), ``retire`` the old one. Running nodes re-read their keyring within seconds."""
    fleet = load_fleet(options.fleet or default_fleet_file())
    directory: Path = options.dir
    try:
        if options.action == "init":
            keyring = provision(fleet, directory)
        else:
            keyring = FleetKeyring.load(fleet_keyring_path(directory))
            if options.action != "show" and not options.id:
                raise KeyringError(f"keys {options.action} needs --id")
            if options.action == "add":
                keyring = keyring.add(options.id, activate=options.activate)
            elif options.action == "activate":
                keyring = keyring.activate(options.id)
            elif options.action == "retire":
                keyring = keyring.retire(options.id)
            if options.action != "show":
                update(fleet, directory, keyring)
    except KeyringError as error:
        print(f"fleet-idem keys: {error}", file=sys.stderr)
        return 2
    print(
        json.dumps({"dir": str(directory), "keys": sorted(keyring.keys), "active": keyring.active})
    )
    return 0


def _client_command(options: argparse.Namespace) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    rclpy.init()
    client = FleetClient(name="fleet_idem_cli")
    try:
        if options.command == "submit":
            key = options.key or str(uuid.uuid4())
            submitted = client.submit(
                options.client,
                key,
                options.robot,
                options.command_type,
                options.payload,
                wait_timeout_s=options.wait,
                deadline_s=options.timeout or options.wait + 30.0,
            )
            response = submitted.response
            print(
                json.dumps(
                    {
                        "key": key,
                        "state": response.state,
                        "status_code": response.status_code,
                        "replayed": response.replayed,
                        "result": _maybe_json(response.result_json),
                        "message": response.message,
                    },
                    indent=2,
                )
            )
            return 0 if response.status_code < 400 else 1
        response = client.check(options.client, options.key)
        print(
            json.dumps(
                {
                    "found": response.found,
                    "state": response.state,
                    "status_code": response.status_code,
                    "robot_id": response.robot_id,
                    "command_type": response.command_type,
                    "payload_sha256": response.payload_sha256,
                    "result": _maybe_json(response.result_json),
                    "message": response.message,
                },
                indent=2,
            )
        )
        return 0 if response.found else 1
    except NoAnswer as error:
        print(
            f"fleet-idem: {error} (is a fleet up in ROS_DOMAIN_ID="
            f"{os.environ.get('ROS_DOMAIN_ID', '0')}?)",
            file=sys.stderr,
        )
        return 3
    finally:
        client.close()
        rclpy.try_shutdown()


def _maybe_json(text: str) -> object:
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return text


if __name__ == "__main__":
    sys.exit(main())
