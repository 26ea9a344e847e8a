"""The demo's faults: process crashes on a schedule, and a client that misbehaves.

Faults inside the nodes (dropped results, duplicated and reordered deliveries) are node
parameters set from the fleet file; this module holds the faults that come from outside
the fleet: kill -9 of robots, of the orchestrator and of simulated VDA 5050 vehicles
(which forget their order) while commands are in flight, restarts of the MQTT broker,
order publishes lost on the way to a vehicle (as MQTT QoS 0 may lose them), and a client
that retries finished commands and reuses keys for other commands.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fleet_idempotency.bringup.processes import FleetProcesses
from fleet_idempotency.bringup.report import RunFigures
from fleet_idempotency.description.fleet import FleetConfig, RobotSpec
from fleet_idempotency.ros.fleet_client import FleetClient
from fleet_idempotency.sim.mission import PlannedCommand
from fleet_idempotency.vda5050.mqtt import BrokerSettings, MqttLink

RESTART_TIMEOUT_S = 60.0
ORCHESTRATOR = "orchestrator"
ROBOT = "robot"
VEHICLE = "vehicle"  # a simulated VDA 5050 vehicle's process
BROKER = "broker"  # the MQTT broker, restarted on the same port


@dataclass(frozen=True)
class Crash:
    after_done: float  # crash once this many commands are final
    target: str  # ORCHESTRATOR or ROBOT


def crash_schedule(
    commands: int,
    robot_crashes: int,
    orchestrator_crashes: int,
    vehicle_crashes: int = 0,
    broker_restarts: int = 0,
) -> list[Crash]:
    """Crashes spread over the run, each kind offset so that two never coincide."""
    plan = []
    for count, offset, target in (
        (robot_crashes, 1.0, ROBOT),
        (orchestrator_crashes, 0.6, ORCHESTRATOR),
        (vehicle_crashes, 0.4, VEHICLE),
        (broker_restarts, 0.8, BROKER),
    ):
        plan += [Crash((i + offset) / (count + 1) * commands, target) for i in range(count)]
    return sorted(plan, key=lambda crash: crash.after_done)


class CrashInjector:
    """Runs a crash schedule against the fleet's processes, on its own thread."""

    def __init__(
        self,
        processes: FleetProcesses,
        fleet: FleetConfig,
        schedule: list[Crash],
        *,
        done: Callable[[], int],
        busy: Mapping[str, bool],
        figures: RunFigures,
        lock: threading.Lock,
        stop: threading.Event,
        rng: random.Random,
        host_agents: bool,
        out: Callable[[str], None],
        orchestrator_victim: Callable[[], str] = lambda: ORCHESTRATOR,
        restart_broker: Callable[[], None] | None = None,
    ) -> None:
        self._restart_broker = restart_broker
        # Replicas: the one holding the leases, so that the kill forces a takeover.
        self._orchestrator_victim = orchestrator_victim
        self._processes = processes
        self._fleet = fleet
        self._schedule = schedule
        self._done = done
        self._busy = busy
        self._figures = figures
        self._lock = lock
        self._stop = stop
        self._rng = rng
        self._host_agents = host_agents
        self._out = out

    def run(self) -> None:
        for crash in self._schedule:
            while self._done() < crash.after_done:
                if self._stop.wait(0.05):
                    return
            if crash.target == BROKER:
                if self._restart_broker is not None:
                    self._out("  !! broker restart (kill -9, same port)")
                    self._restart_broker()
                    with self._lock:
                        self._figures.broker_restarts += 1
                continue
            name = self._victim(crash.target)
            if name is None:
                continue
            restarts_before = self._processes.restart_count(name)
            self._out(f"  !! kill -9 {name}")
            self._processes.crash(name)
            with self._lock:
                if crash.target == ORCHESTRATOR:
                    self._figures.orchestrator_crashes += 1
                elif crash.target == VEHICLE:
                    self._figures.vehicle_crashes += 1
                else:
                    self._figures.robot_crashes += 1
            # Bringing it back is the supervisor's job, as it would be after a real crash:
            # the next crash waits until it did, so two never overlap on one process.
            if not self._processes.wait_restarted(name, restarts_before + 1, RESTART_TIMEOUT_S):
                self._out(f"  !! {name} was not restarted within {RESTART_TIMEOUT_S:.0f} s")
                return

    def _victim(self, target: str) -> str | None:
        if target == ORCHESTRATOR:
            return self._orchestrator_victim()
        if target == VEHICLE:
            children = self._processes.children
            vehicles = [r.id for r in self._fleet.robots if f"vehicle_{r.id}" in children]
            if not vehicles:
                return None
            # A vehicle in the middle of an order: the restart makes it forget the order.
            moving = [robot_id for robot_id in vehicles if self._busy.get(robot_id)]
            return f"vehicle_{self._rng.choice(moving or vehicles)}"
        if self._host_agents:
            return "agents"
        robots = self._fleet.robots
        busy = [robot for robot in robots if self._busy.get(robot.id)]
        # A busy forklift makes the most interesting victim: a pick cut in half.
        forklifts = [robot.id for robot in busy if robot.type == "forklift"]
        choice = self._rng.choice(forklifts or [r.id for r in busy or robots])
        return f"agent_{choice}"


class MisbehavingClient:
    """After a command is final: sometimes retry it, and now and then reuse its key."""

    def __init__(
        self,
        client_id: str,
        *,
        retry_probability: float,
        mismatch_every: int,
        figures: RunFigures,
        lock: threading.Lock,
        rng: random.Random,
    ) -> None:
        self._client_id = client_id
        self._retry_probability = retry_probability
        self._mismatch_every = mismatch_every
        self._figures = figures
        self._lock = lock
        self._rng = rng
        self._finished = 0

    def after_final(self, client: FleetClient, command: PlannedCommand, final: Any) -> None:
        if self._rng.random() < self._retry_probability:
            # The client lost our answer and retries: the same key must replay, not re-run.
            again = client.submit(
                self._client_id,
                command.key,
                command.robot_id,
                command.command_type,
                command.payload,
            ).response
            same = (
                again.replayed
                and again.status_code == final.status_code
                and again.result_json == final.result_json
            )
            with self._lock:
                self._figures.submit_calls += 1
                self._figures.replays_verified += int(same)
                self._figures.replay_mismatches += int(not same)
        with self._lock:
            self._finished += 1
            misuse = self._mismatch_every > 0 and self._finished % self._mismatch_every == 0
        if misuse:
            # A client bug: the key of a finished command reused for another, valid command.
            answer = client.submit(
                self._client_id,
                command.key,
                command.robot_id,
                command.command_type,
                different_payload(command),
            ).response
            with self._lock:
                self._figures.mismatches_injected += 1
                self._figures.mismatches_rejected += int(answer.status_code == 422)


def different_payload(command: PlannedCommand) -> dict[str, Any]:
    """A valid payload for the same command type that differs from the original."""
    payload = dict(command.payload)
    for field_name in ("waypoint", "slot", "dock"):
        if field_name in payload:
            payload[field_name] = f"{payload[field_name]}X"
            return payload
    payload["x"] = float(payload["x"]) + 1.0
    return payload


class OrderDropper:
    """Now and then the next order publish to a simulated VDA 5050 vehicle is lost (its
    test-only fault topic, ``{"drop_orders": 1}``): the backend must re-send it."""

    def __init__(
        self,
        broker: BrokerSettings,
        vehicles: list[RobotSpec],
        *,
        probability: float,
        figures: RunFigures,
        lock: threading.Lock,
        rng: random.Random,
    ) -> None:
        self._topics = {
            robot.id: (
                f"fleet_idem_sim/{robot.backend_params['manufacturer']}/"
                f"{robot.backend_params['serial_number']}/faults"
            )
            for robot in vehicles
        }
        self._probability = probability
        self._figures = figures
        self._lock = lock
        self._rng = rng
        self._link = MqttLink(broker, "fleet-idem-demo-faults", on_message=lambda _t, _p: None)
        self._link.start()

    def after_final(self, robot_id: str) -> None:
        """After a command of ``robot_id`` is final: maybe lose the publish of its next."""
        topic = self._topics.get(robot_id)
        if topic is None or self._rng.random() >= self._probability:
            return
        if self._link.publish(topic, json.dumps({"drop_orders": 1}).encode(), qos=1):
            with self._lock:
                self._figures.orders_dropped += 1

    def close(self) -> None:
        self._link.stop()
