"""``fleet-idem demo``: a simulated fleet doing real work while faults are injected.

It starts the same nodes as ``fleet.launch.py`` (from ``launch_plan``) as plain
processes, runs a warehouse mission through the orchestrator's API with one client
worker per robot, and meanwhile drops results, duplicates deliveries, re-sends submits,
reuses keys with other payloads, and kill -9s robots and the orchestrator. A fleet with
VDA 5050 robots gets a throwaway password-protected Mosquitto and one simulated vehicle
process per such robot; then order publishes are lost, vehicles are kill -9ed (they
forget their order) and the broker is restarted too. At the end
it checks the invariants against the world's oracle, the event log and the stores,
prints a report, and exits non-zero if any invariant broke. The faults from outside the
fleet live in ``faults.py``, the read-back of the stores in ``audit.py``; this module
sets up the run and drives the mission.
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rclpy
import yaml

from fleet_idempotency.bringup.audit import audit_orchestrator
from fleet_idempotency.bringup.faults import (
    CrashInjector,
    MisbehavingClient,
    OrderDropper,
    crash_schedule,
)
from fleet_idempotency.bringup.http_client import HttpFleetClient
from fleet_idempotency.bringup.keys import provision
from fleet_idempotency.bringup.mosquitto import LocalMosquitto
from fleet_idempotency.bringup.plan import (
    PASSWORD_VARIABLE,
    api_namespaces,
    http_url,
    launch_plan,
    vda5050_robots,
    with_broker,
)
from fleet_idempotency.bringup.postgres import LocalPostgres
from fleet_idempotency.bringup.processes import FleetProcesses, Restart
from fleet_idempotency.bringup.report import RunFigures, check_invariants, render
from fleet_idempotency.description.fleet import FaultSettings, FleetConfig, load_fleet
from fleet_idempotency.http.ports import PortLease
from fleet_idempotency.orchestrator.core import robot_key
from fleet_idempotency.orchestrator.journal import needless_sends
from fleet_idempotency.orchestrator.postgres_leases import PostgresLeaseTable
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id
from fleet_idempotency.ros.fleet_client import FleetClient, NoAnswer, Submitted
from fleet_idempotency.sim.mission import MissionPlanner, PlannedCommand
from fleet_idempotency.store import State
from fleet_idempotency.store.urls import redacted_url
from fleet_idempotency.vda5050.mqtt import BrokerSettings

CLIENT_ID = "wms"
FINAL = (State.COMPLETED, State.FAILED, State.INTERRUPTED)


@dataclass(frozen=True)
class DemoOptions:
    fleet_file: Path
    commands: int = 400
    store_dir: Path | None = None
    time_scale: float | None = None
    host_agents: bool = False
    faults: bool = True
    drop_results: float = 0.2
    duplicate_deliveries: float = 0.1
    reordered_deliveries: float = 0.1
    client_retries: float = 0.1
    mismatch_every: int = 40
    robot_crashes: int = 2
    orchestrator_crashes: int = 1
    # With VDA 5050 robots: kill -9s of their simulated vehicles, restarts of the broker,
    # and the fraction of their commands whose next order publish is lost.
    vehicle_crashes: int = 1
    broker_restarts: int = 1
    drop_orders: float = 0.2
    seed: int = 1
    # Short waits keep clients re-sending promptly while the orchestrator restarts.
    wait_timeout_s: float = 5.0
    progress_period_s: float = 2.0
    keep_store: bool = False
    http: bool = True  # start the HTTP API beside the orchestrator, and print its URL
    http_port: int | None = None
    http_clients: int = 2  # the clients of the last N robots submit over HTTP instead of ROS
    # The clients of the first N robots send ExecuteCommand goals (the action) instead of
    # SubmitCommand calls; the rest of the ROS clients call the service.
    action_clients: int = 2
    # Orchestrator replicas sharing a PostgreSQL database: ``store_url``, or (None) a
    # throwaway local server the demo starts and removes.
    replicas: int = 1
    store_url: str | None = None


class Demo:
    def __init__(self, options: DemoOptions, out: Callable[[str], None] = print) -> None:
        self.options = options
        self.out = out
        self.rng = random.Random(options.seed)
        self.figures = RunFigures(commands_planned=0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._mission_keys: set[tuple[str, str]] = set()
        self._done = 0
        self._busy: dict[str, bool] = {}
        self._misbehaving = (
            MisbehavingClient(
                CLIENT_ID,
                retry_probability=options.client_retries,
                mismatch_every=options.mismatch_every,
                figures=self.figures,
                lock=self._lock,
                rng=self.rng,
            )
            if options.faults
            else None
        )
        self.store_dir = options.store_dir or Path(tempfile.mkdtemp(prefix="fleet-idem-demo-"))
        # Same client id over HTTP (its API key maps to it) as over ROS: one key scope.
        self._api_key = secrets.token_hex(16)
        self._http: dict[str, HttpFleetClient] = {}
        self._broker: LocalMosquitto | None = None
        self._dropper: OrderDropper | None = None
        self._over_action: set[str] = set()
        self._goals = 0

    # --- set-up -------------------------------------------------------------------------
    def _effective_fleet(self) -> tuple[FleetConfig, Path]:
        fleet = load_fleet(self.options.fleet_file)
        options = self.options
        faults = FaultSettings(
            result_drop_probability=options.drop_results if options.faults else 0.0,
            duplicate_delivery_probability=options.duplicate_deliveries if options.faults else 0.0,
            reorder_delivery_probability=options.reordered_deliveries if options.faults else 0.0,
            seed=options.seed,
        )
        simulation = fleet.simulation
        if options.time_scale is not None:
            simulation = simulation.model_copy(update={"time_scale": options.time_scale})
        fleet = fleet.model_copy(update={"faults": faults, "simulation": simulation})
        if self._broker is not None:
            # The throwaway broker's address and login; the password only in the
            # environment of the processes (PASSWORD_VARIABLE), never in a file or argv.
            fleet = with_broker(
                fleet,
                self._broker.host,
                self._broker.port,
                username=self._broker.username,
                password_env=PASSWORD_VARIABLE,
            )
        path = self.store_dir / "fleet.yaml"
        self.store_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(fleet.model_dump(mode="json"), sort_keys=False))
        return fleet, path

    # --- run ----------------------------------------------------------------------------
    def run(self) -> int:
        self._store_url = self.options.store_url
        with contextlib.ExitStack() as stack:
            if self.options.replicas > 1 and self._store_url is None:
                self._store_url = stack.enter_context(LocalPostgres()).url
            stack.enter_context(self._mqtt_broker())
            status = self._run()
        return status

    @contextlib.contextmanager
    def _mqtt_broker(self) -> Iterator[None]:
        """A throwaway password-protected Mosquitto when the fleet has VDA 5050 robots."""
        if not vda5050_robots(load_fleet(self.options.fleet_file)):
            yield
            return
        with LocalMosquitto(username="fleet", password=secrets.token_hex(16)) as broker:
            self._broker = broker
            try:
                yield
            finally:
                self._broker = None

    def _lease_holder(self) -> str:
        """The replica (process name) holding most robots' leases right now."""
        assert self._store_url is not None
        table = PostgresLeaseTable(self._store_url)
        try:
            holders = Counter(h.partition("/")[0] for h, _token in table.holders().values())
        finally:
            table.close()
        return holders.most_common(1)[0][0] if holders else "orchestrator"

    def _run(self) -> int:
        fleet, fleet_file = self._effective_fleet()
        self.figures.commands_planned = self.options.commands
        planner = MissionPlanner(fleet, self.options.commands, self.rng)
        self.out(
            f"fleet_idempotency demo: {len(fleet.robots)} robots "
            f"({', '.join(r.id for r in fleet.robots)}), {self.options.commands} commands, "
            f"time scale {fleet.simulation.time_scale}, faults "
            f"{'on' if self.options.faults else 'off'}; logs and stores in "
            f"{self.store_dir}"
        )
        with (
            lease_domain_id() as domain_id,
            PortLease(
                fleet.http.host,
                self.options.http_port or fleet.http.port,
                exact=self.options.http_port is not None,
            ) as http_port,
        ):
            env = isolated_environment(domain_id)
            env["FLEET_IDEM_API_KEYS"] = f"{CLIENT_ID}={self._api_key}"
            self._announce_broker(fleet, env)
            processes = FleetProcesses(
                self.store_dir / "logs",
                env,
                on_restart=self._restarted,
                on_give_up=lambda name: self.out(
                    f"  !! {name} cannot start and is not restarted (see its log)"
                ),
            )
            context = rclpy.Context()
            rclpy.init(context=context, domain_id=domain_id)
            client: FleetClient | None = None
            try:
                keyring_dir = self.store_dir / "keys"
                provision(fleet, keyring_dir)
                plan = launch_plan(
                    fleet,
                    fleet_file=fleet_file,
                    store_dir=self.store_dir,
                    keyring_dir=keyring_dir,
                    with_http=self.options.http,
                    http_port=http_port.port,
                    replicas=self.options.replicas,
                    store_url=self._store_url,
                )
                if self.options.replicas > 1:
                    self.out(
                        f"orchestrator        {self.options.replicas} replicas sharing "
                        f"{redacted_url(self._store_url or '')} (leases, fencing tokens)"
                    )
                processes.start_plan(
                    plan,
                    fleet_file=fleet_file,
                    store_dir=self.store_dir,
                    host_agents=self.options.host_agents,
                    keyring_dir=keyring_dir,
                )
                url = http_url(plan, fleet)
                if url:
                    self.out(
                        f"HTTP API and fleet page: {url}#token={self._api_key} (OpenAPI: {url}docs)"
                    )
                    self._start_http_clients(url, fleet)
                # Every replica's API: a re-send goes to the next, so the kill of one
                # costs the mission a patience, not the wait for its restart.
                client = FleetClient(
                    context, "demo_client", api_namespace=api_namespaces(plan) or "/fleet"
                )
                self._watch(client, fleet)
                client.wait_for_services(timeout_s=90.0)
                self._wait_for_robots(fleet, processes)
                items_at_start = _world_state(client, processes)["items_total"]
                started = time.monotonic()
                self._run_mission(client, planner, fleet, processes)
                self.figures.wall_s = time.monotonic() - started
                self.figures.reconciliations = planner.reconciliations
                world = _world_state(client, processes)
            finally:
                if client is not None:
                    client.close()
                context.try_shutdown()
                exit_codes = processes.stop_all()
        invariants = check_invariants(
            world=world,
            mission_keys=self._mission_keys,
            items_at_start=items_at_start,
            **audit_orchestrator(self.store_dir, store_url=self._store_url),
            figures=self.figures,
            resends_expected=self.options.faults and self.options.drop_results > 0,
        )
        self._report_clients()
        self.out(render(self.figures, invariants, world))
        crashed = {n: c for n, c in exit_codes.items() if c not in (0, None)}
        if crashed:
            self.out(f"note: processes that did not exit cleanly at the end: {crashed}")
        if (
            not self.options.keep_store
            and self.options.store_dir is None
            and all(inv.ok for inv in invariants)
        ):
            shutil.rmtree(self.store_dir, ignore_errors=True)
        return 0 if all(inv.ok for inv in invariants) else 1

    def _announce_broker(self, fleet: FleetConfig, env: dict[str, str]) -> None:
        """The broker's password goes into the processes' environment only."""
        if self._broker is None:
            return
        env[PASSWORD_VARIABLE] = self._broker.password
        self.out(
            f"MQTT broker         mosquitto on {self._broker.host}:{self._broker.port} "
            f"(password required) for VDA 5050 robots "
            f"{', '.join(r.id for r in vda5050_robots(fleet))}, a simulated vehicle each"
        )

    def _report_clients(self) -> None:
        if self._http:
            calls = sum(http.calls for http in self._http.values())
            retried = sum(http.retried_503 for http in self._http.values())
            self.out(
                f"HTTP clients        {', '.join(self._http)}: {calls} calls, {retried} answered "
                "503 (orchestrator down) and retried with the same key"
            )
        if self._over_action:
            self.out(
                f"action clients      {', '.join(sorted(self._over_action))}: {self._goals} "
                "ExecuteCommand goals (a re-sent goal has a new UUID and the same key)"
            )

    def _restarted(self, restart: Restart) -> None:
        with self._lock:
            self.figures.restarts[restart.name] += 1
        self.out(
            f"  !! supervisor restarted {restart.name} (exit code {restart.exit_code}, "
            f"restart #{restart.count}, after {restart.delay_s:.1f} s)"
        )

    def _start_http_clients(self, url: str, fleet: FleetConfig) -> None:
        count = min(self.options.http_clients, len(fleet.robots))
        robots = [robot.id for robot in fleet.robots[len(fleet.robots) - count :]]
        if not robots:
            return
        self._http = {robot_id: HttpFleetClient(url, self._api_key) for robot_id in robots}
        next(iter(self._http.values())).wait_ready()
        self.out(f"clients of {', '.join(robots)} submit over HTTP, the others over ROS")

    def _choose_action_clients(self, fleet: FleetConfig) -> None:
        over_ros = [robot.id for robot in fleet.robots if robot.id not in self._http]
        self._over_action = set(over_ros[: self.options.action_clients])
        if self._over_action:
            self.out(
                f"clients of {', '.join(sorted(self._over_action))} send ExecuteCommand goals "
                "(the action), the other ROS clients call SubmitCommand"
            )

    def _watch(self, client: FleetClient, fleet: FleetConfig) -> None:
        def on_result(result: Any) -> None:
            with self._lock:
                if result.replayed:
                    self.figures.results_seen["replayed"] += 1
                if result.status_code in (409, 429):
                    self.figures.results_seen[str(result.status_code)] += 1
                if result.state == State.INTERRUPTED and not result.replayed:
                    self.figures.results_seen["interrupted"] += 1

        def on_event(event: Any) -> None:
            with self._lock:
                self.figures.events_seen[event.event_type] += 1
                if event.event_type == "retried":
                    why = json.loads(event.detail_json).get("why", "unknown")
                    self.figures.re_sends_why[why] += 1
                elif event.event_type in ("result", "interrupted"):
                    detail = json.loads(event.detail_json)
                    self.figures.re_sends_answered_late += needless_sends(detail)

        client.on_results(on_result)
        client.on_events(on_event)
        for robot in fleet.robots:
            client.on_status(robot.id, lambda s: self._busy.__setitem__(s.robot_id, s.busy))

    def _wait_for_robots(self, fleet: FleetConfig, processes: FleetProcesses) -> None:
        deadline = time.monotonic() + 90.0
        while len(self._busy) < len(fleet.robots):
            dead = [n for n in processes.children if not processes.alive(n)]
            if dead:
                raise RuntimeError(
                    f"{dead[0]} exited during start-up:\n{processes.log_tail(dead[0])}"
                )
            if time.monotonic() > deadline:
                missing = sorted({r.id for r in fleet.robots} - set(self._busy))
                raise RuntimeError(f"robots never reported status: {missing}")
            self._stop.wait(0.1)

    def _run_mission(
        self,
        client: FleetClient,
        planner: MissionPlanner,
        fleet: FleetConfig,
        processes: FleetProcesses,
    ) -> None:
        self._choose_action_clients(fleet)
        planner_lock = threading.Lock()

        def next_command(robot_id: str) -> PlannedCommand | None:
            with planner_lock:
                return planner.next_command(robot_id)

        workers = [
            threading.Thread(
                target=self._worker,
                name=f"client-{robot.id}",
                daemon=True,
                args=(client, planner, planner_lock, robot.id, next_command),
            )
            for robot in fleet.robots
        ]
        options = self.options
        vehicles = vda5050_robots(fleet)
        broker = self._broker
        if options.faults and broker is not None and options.drop_orders > 0:
            self._dropper = OrderDropper(
                BrokerSettings(
                    broker_host=broker.host,
                    broker_port=broker.port,
                    username=broker.username,
                    password=broker.password,
                ),
                vehicles,
                probability=options.drop_orders,
                figures=self.figures,
                lock=self._lock,
                rng=self.rng,
            )
        crashes = CrashInjector(
            processes,
            fleet,
            crash_schedule(
                options.commands,
                options.robot_crashes,
                options.orchestrator_crashes,
                options.vehicle_crashes if vehicles else 0,
                options.broker_restarts if broker is not None else 0,
            ),
            done=lambda: self._done,
            busy=self._busy,
            figures=self.figures,
            lock=self._lock,
            stop=self._stop,
            rng=self.rng,
            host_agents=options.host_agents,
            out=self.out,
            orchestrator_victim=self._lease_holder if self._store_url else lambda: "orchestrator",
            restart_broker=(lambda: broker.restart(kill=True)) if broker is not None else None,
        )
        chaos = threading.Thread(target=crashes.run, name="crash-injector", daemon=True)
        for worker in workers:
            worker.start()
        if self.options.faults:
            chaos.start()
        last_report = time.monotonic()
        started = last_report
        try:
            while any(worker.is_alive() for worker in workers):
                for worker in workers:
                    worker.join(timeout=0.1)
                if time.monotonic() - last_report >= self.options.progress_period_s:
                    last_report = time.monotonic()
                    self._progress(last_report - started)
        finally:
            self._stop.set()
            if chaos.is_alive():
                chaos.join(timeout=30)
            if self._dropper is not None:
                self._dropper.close()

    def _progress(self, elapsed_s: float) -> None:
        with self._lock:
            events = self.figures.events_seen
            self.out(
                f"[{elapsed_s:6.1f}s] {self._done}/{self.options.commands} final | "
                f"dispatched {events['dispatched']} retried {events['retried']} "
                f"dup-suppressed {events['duplicate_suppressed']} | crashes: robots "
                f"{self.figures.robot_crashes}, orchestrator {self.figures.orchestrator_crashes}"
            )

    # --- client workers -----------------------------------------------------------------
    def _worker(
        self,
        client: FleetClient,
        planner: MissionPlanner,
        planner_lock: threading.Lock,
        robot_id: str,
        next_command: Callable[[str], PlannedCommand | None],
    ) -> None:
        while not self._stop.is_set():
            command = next_command(robot_id)
            if command is None:
                return
            with self._lock:
                self._mission_keys.add((robot_id, robot_key(CLIENT_ID, command.key)))
            try:
                response = self._until_final(client, command)
            except NoAnswer as error:
                with self._lock:
                    self.figures.unexpected.append(f"{command.key}: {error}")
                continue
            with self._lock:
                self._done += 1
            state = State(response.state)
            if state == State.COMPLETED:
                with planner_lock:
                    planner.completed(command, json.loads(response.result_json or "{}"))
            elif state == State.FAILED:
                with self._lock:
                    self.figures.failures.append(f"{command.purpose}: {response.result_json}")
            elif state not in FINAL:
                with self._lock:
                    self.figures.unexpected.append(
                        f"{command.purpose}: {response.status_code} {response.message}"
                    )
            if planner.needs_reconciliation(command, state):
                world = client.world_state()
                with planner_lock:
                    planner.reconcile(robot_id, world)
            if self._misbehaving is not None:
                self._misbehaving.after_final(client, command, response)
            if self._dropper is not None:
                self._dropper.after_final(robot_id)

    def _until_final(self, client: FleetClient, command: PlannedCommand) -> Any:
        started = time.monotonic()
        over_http = self._http.get(command.robot_id)
        while True:
            if over_http is not None:
                submitted = over_http.submit(
                    command.key,
                    command.robot_id,
                    command.command_type,
                    command.payload,
                    wait_timeout_s=self.options.wait_timeout_s,
                )
            elif command.robot_id in self._over_action:
                submitted = self._execute(client, command)
            else:
                submitted = client.submit(
                    CLIENT_ID,
                    command.key,
                    command.robot_id,
                    command.command_type,
                    command.payload,
                    wait_timeout_s=self.options.wait_timeout_s,
                )
            response = submitted.response
            with self._lock:
                self.figures.submit_calls += submitted.calls
                self.figures.client_resubmits += submitted.calls - 1
                self.figures.answer_codes[response.status_code] += 1
            if response.status_code in (202, 409, 503):
                # Not final within the wait (or the orchestrator went away under a goal):
                # ask again with the same key.
                continue
            if response.status_code == 429:
                self._stop.wait(0.2)
                continue
            with self._lock:
                self.figures.latencies_s.append(time.monotonic() - started)
                self.figures.final_states[State(response.state).name] += 1
            return response

    def _execute(self, client: FleetClient, command: PlannedCommand) -> Submitted:
        """The command as an ExecuteCommand goal, followed to its end: answered like a
        submit (the result has SubmitCommand's fields)."""
        executed = client.execute(
            CLIENT_ID, command.key, command.robot_id, command.command_type, command.payload
        )
        with self._lock:
            self._goals += executed.goals
        return Submitted(executed.result, executed.goals, executed.seconds)


def _world_state(client: FleetClient, processes: FleetProcesses) -> dict[str, Any]:
    """The world's state; when it does not answer, say whether its process is alive and
    how its log ends: a silent world is otherwise one line with no lead."""
    try:
        return client.world_state()
    except NoAnswer as error:
        name = "world_simulator"
        state = "is alive" if processes.alive(name) else "has exited"
        raise RuntimeError(
            f"{error}; the {name} process {state}, its log ends:\n{processes.log_tail(name)}"
        ) from error
