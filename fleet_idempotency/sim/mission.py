"""A warehouse mission: a realistic mix of commands, planned robot by robot.

Forklifts shuttle pallets between the pallet slots they own, arms move items between the
stations within their reach, AMRs drive between waypoints and dock; forklifts also drive
and dock now and then. The planner keeps its own expectation of where everything is and
plans the next command of a robot from it. When an outcome contradicts it (a command
INTERRUPTED by a crash, or refused), the caller passes the world's actual state and the
planner reconciles from that, as an operator would, and continues with new keys.
No ROS imports.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet_idempotency.description.fleet import FleetConfig, RobotSpec
from fleet_idempotency.description.layout import Slot
from fleet_idempotency.sim.profiles import PROFILES
from fleet_idempotency.store import State


@dataclass(frozen=True)
class PlannedCommand:
    robot_id: str
    command_type: str
    payload: dict[str, Any]
    key: str
    purpose: str


@dataclass
class _RobotPlan:
    spec: RobotSpec
    slots: list[str] = field(default_factory=list)  # pallet slots or stations it owns
    carrying: str | None = None


class MissionPlanner:
    def __init__(self, fleet: FleetConfig, total_commands: int, rng: random.Random) -> None:
        self.fleet = fleet
        self.total_commands = total_commands
        self.rng = rng
        self.issued = 0
        self.reconciliations = 0
        self._slots: dict[str, str | None] = {
            name: slot.item for name, slot in fleet.world.slots.items()
        }
        self._robots = {spec.id: _RobotPlan(spec) for spec in fleet.robots}
        self._assign_slots()

    def _assign_slots(self) -> None:
        forklifts = [p for p in self._robots.values() if p.spec.type == "forklift"]
        pallets = sorted(n for n, s in self.fleet.world.slots.items() if s.kind == "pallet")
        for index, name in enumerate(pallets):
            if forklifts:
                forklifts[index % len(forklifts)].slots.append(name)
        for plan in self._robots.values():
            if plan.spec.type == "arm":
                plan.slots = sorted(
                    name
                    for name, slot in self.fleet.world.slots.items()
                    if slot.kind == "station"
                    and _within_reach(plan.spec, slot)
                    and not any(name in other.slots for other in self._robots.values())
                )

    # --- planning -----------------------------------------------------------------------
    def next_command(self, robot_id: str) -> PlannedCommand | None:
        """The robot's next command, or None when the mission's budget is spent."""
        if self.issued >= self.total_commands:
            return None
        plan = self._robots[robot_id]
        command = self._plan_for(plan)
        if command is not None:
            self.issued += 1
        return command

    def _plan_for(self, plan: _RobotPlan) -> PlannedCommand | None:
        robot = plan.spec
        if robot.type == "amr" or (robot.type == "forklift" and self.rng.random() < 0.2):
            return self._drive(robot)
        if plan.carrying is not None:
            free = [s for s in plan.slots if self._slots[s] is None]
            if not free:
                return self._drive(robot) if robot.type != "arm" else None
            target = self.rng.choice(free)
            return self._command(
                robot, "place", {"slot": target}, f"place {plan.carrying} at {target}"
            )
        loaded = [s for s in plan.slots if self._slots[s] is not None]
        if not loaded:
            return self._drive(robot) if robot.type != "arm" else None
        source = self.rng.choice(loaded)
        return self._command(
            robot, "pick", {"slot": source}, f"pick {self._slots[source]} from {source}"
        )

    def _drive(self, robot: RobotSpec) -> PlannedCommand:
        world = self.fleet.world
        docks = sorted(world.docks)
        if docks and self.rng.random() < 0.25:
            dock = docks[self.fleet.robots.index(robot) % len(docks)]
            return self._command(robot, "dock", {"dock": dock}, f"dock at {dock}")
        if world.waypoints and self.rng.random() < 0.7:
            waypoint = self.rng.choice(sorted(world.waypoints))
            return self._command(
                robot, "move_to_waypoint", {"waypoint": waypoint}, f"drive to {waypoint}"
            )
        x, y = round(self.rng.uniform(1, 25), 2), round(self.rng.uniform(1, 12), 2)
        return self._command(robot, "move_to_waypoint", {"x": x, "y": y}, f"drive to ({x}, {y})")

    def _command(
        self, robot: RobotSpec, command_type: str, payload: dict[str, Any], purpose: str
    ) -> PlannedCommand:
        return PlannedCommand(robot.id, command_type, payload, str(uuid.uuid4()), purpose)

    # --- outcomes -----------------------------------------------------------------------
    def completed(self, command: PlannedCommand, result: Mapping[str, Any]) -> None:
        """A COMPLETED result: update the expectation the way the robot changed the world."""
        plan = self._robots[command.robot_id]
        if command.command_type == "pick":
            slot = command.payload["slot"]
            plan.carrying = str(result.get("item") or self._slots[slot])
            self._slots[slot] = None
        elif command.command_type == "place":
            self._slots[command.payload["slot"]] = plan.carrying
            plan.carrying = None

    def reconcile(self, robot_id: str, world_state: Mapping[str, Any]) -> None:
        """After an INTERRUPTED/FAILED/refused handling command: believe the world."""
        self.reconciliations += 1
        plan = self._robots[robot_id]
        plan.carrying = world_state.get("carried", {}).get(robot_id)
        for slot in plan.slots:
            self._slots[slot] = world_state.get("slots", {}).get(slot)

    def needs_reconciliation(self, command: PlannedCommand, state: State) -> bool:
        return command.command_type in ("pick", "place") and state != State.COMPLETED

    def expected_items(self) -> int:
        return sum(1 for item in self._slots.values() if item is not None) + sum(
            1 for plan in self._robots.values() if plan.carrying is not None
        )


def _within_reach(robot: RobotSpec, slot: Slot) -> bool:
    return robot.start.distance_to(slot.x, slot.y) <= PROFILES[robot.type].reach_m
