"""The demo's faults from outside the fleet, as plain logic: when to crash, how to misuse."""

from __future__ import annotations

import json
import random

from fleet_idempotency.bringup.faults import (
    BROKER,
    ORCHESTRATOR,
    ROBOT,
    VEHICLE,
    crash_schedule,
    different_payload,
)
from fleet_idempotency.commands import parse_payload
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.sim.mission import MissionPlanner
from fleet_idempotency.store.fingerprint import fingerprint_of

from support.paths import FLEET_FILE


def test_crashes_are_spread_over_the_run_in_order_and_never_coincide() -> None:
    schedule = crash_schedule(
        commands=400, robot_crashes=2, orchestrator_crashes=1, vehicle_crashes=1, broker_restarts=1
    )
    targets = [crash.target for crash in schedule]
    assert sorted(targets) == sorted([ROBOT, ROBOT, ORCHESTRATOR, VEHICLE, BROKER])
    points = [crash.after_done for crash in schedule]
    assert points == sorted(points)
    assert len(set(points)) == len(points)
    assert all(0 < point < 400 for point in points)


def test_no_crashes_when_none_are_asked_for() -> None:
    assert crash_schedule(commands=100, robot_crashes=0, orchestrator_crashes=0) == []


def test_a_reused_key_carries_a_valid_payload_with_another_fingerprint() -> None:
    fleet = load_fleet(FLEET_FILE)
    planner = MissionPlanner(fleet, total_commands=60, rng=random.Random(5))
    seen = 0
    for robot in fleet.robots:
        while (command := planner.next_command(robot.id)) is not None:
            planner.completed(command, {})
            other = different_payload(command)
            # Still a valid command of the same type (the robot would accept it) ...
            parse_payload(command.command_type, json.dumps(other))
            # ... but a different intent, so the store must answer 422, never replay.
            assert fingerprint_of(robot.id, command.command_type, other) != fingerprint_of(
                robot.id, command.command_type, command.payload
            )
            seen += 1
    assert seen > 0
