"""The demo's mission planner and its invariant checks, as plain logic."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

from fleet_idempotency.bringup.report import RunFigures, check_invariants, render
from fleet_idempotency.commands import check_capability, parse_payload
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.sim.mission import MissionPlanner
from fleet_idempotency.sim.world import World
from fleet_idempotency.store import State

from support.paths import FLEET_FILE

FLEET = load_fleet(FLEET_FILE)


def test_planned_commands_are_valid_and_physically_possible_when_executed_in_order() -> None:
    """Execute the plan directly against the world: no pick from an empty slot, ever."""
    planner = MissionPlanner(FLEET, total_commands=300, rng=random.Random(3))
    world = World(FLEET.world)
    kinds: Counter[str] = Counter()
    robots = [robot.id for robot in FLEET.robots]
    while batch := [c for r in robots if (c := planner.next_command(r)) is not None]:
        for command in batch:
            robot_type = FLEET.robot(command.robot_id).type
            check_capability(robot_type, command.command_type)
            parse_payload(command.command_type, json.dumps(command.payload))
            kinds[command.command_type] += 1
            if command.command_type in ("pick", "place"):
                item = world.act(
                    command.robot_id,
                    command.key,
                    command.command_type,
                    command.payload["slot"],
                    FLEET.robot(command.robot_id).start,
                )
                planner.completed(command, {"item": item})
    assert sum(kinds.values()) == 300
    assert set(kinds) == {"move_to_waypoint", "pick", "place", "dock"}
    assert world.snapshot()["failed_actions"] == 0
    assert world.snapshot()["items_total"] == planner.expected_items() == 8


def test_reconciliation_believes_the_world_after_an_interruption() -> None:
    planner = MissionPlanner(FLEET, total_commands=100, rng=random.Random(5))
    pick = next(
        c
        for _ in range(50)
        if (c := planner.next_command("arm_1")) is not None and c.command_type == "pick"
    )
    assert planner.needs_reconciliation(pick, State.INTERRUPTED)
    assert not planner.needs_reconciliation(pick, State.COMPLETED)
    # The pick happened before the crash: the item is in the gripper, the slot is empty.
    slot = pick.payload["slot"]
    item = FLEET.world.slots[slot].item
    world_state: dict[str, Any] = {
        "carried": {"arm_1": item},
        "slots": {
            name: (None if name == slot else s.item) for name, s in FLEET.world.slots.items()
        },
    }
    planner.reconcile("arm_1", world_state)
    follow_up = planner.next_command("arm_1")
    assert follow_up is not None and follow_up.command_type == "place"
    assert follow_up.key != pick.key
    assert planner.reconciliations == 1


def test_budget_stops_the_mission() -> None:
    planner = MissionPlanner(FLEET, total_commands=2, rng=random.Random(1))
    assert planner.next_command("amr_1") is not None
    assert planner.next_command("amr_2") is not None
    assert planner.next_command("amr_3") is None


def _world(effects: dict[str, dict[str, list[str]]], **extra: Any) -> dict[str, Any]:
    counts = [len(a) for keys in effects.values() for a in keys.values()]
    return {
        "side_effects": effects,
        "max_side_effects_per_key": max(counts, default=0),
        "keys_with_side_effects": len(counts),
        "items_total": 8,
        "failed_actions": 0,
        **extra,
    }


def _check(world: dict[str, Any], **overrides: Any) -> dict[str, bool]:
    arguments: dict[str, Any] = {
        "world": world,
        "mission_keys": {("amr_1", "wms:k1"), ("amr_1", "wms:k2")},
        "items_at_start": 8,
        "event_identities": [("wms", "k1", "accepted", "1")],
        "replay_mismatches": [],
        "unfinished_keys": [],
        "figures": RunFigures(),
        **overrides,
    }
    return {inv.name: inv.ok for inv in check_invariants(**arguments)}


def test_a_clean_run_passes_every_invariant() -> None:
    results = _check(_world({"amr_1": {"wms:k1": ["arrive"], "wms:k2": ["dock"]}}))
    assert all(results.values()), results


def test_each_broken_invariant_is_reported() -> None:
    twice = _check(_world({"amr_1": {"wms:k1": ["pick", "pick"]}}))
    assert not twice["at most one execution per key (world oracle)"]
    stranger = _check(_world({"amr_1": {"other:k9": ["dock"]}}))
    assert not stranger["only the mission's keys acted"]
    lost = _check(_world({}), unfinished_keys=["k1"])
    assert not lost["every accepted command reached a final state"]
    vanished = _check(_world({}, items_total=7))
    assert not vanished["pallets and items conserved"]
    duplicated = _check(_world({}), event_identities=[("a", "b", "c", "d")] * 2)
    assert not duplicated["event log has no duplicate event"]
    drift = _check(_world({}), replay_mismatches=["k1"])
    assert not drift["event log replay equals the orchestrator's store"]
    figures = RunFigures(mismatches_injected=2, mismatches_rejected=1, failures=["x"])
    sloppy = _check(_world({}), figures=figures)
    assert not sloppy["reused keys with another payload are refused (422)"]
    assert not sloppy["no command failed"]
    silent = _check(_world({}), resends_expected=True)
    assert not silent["lost results were recovered by re-sends"]
    figures = RunFigures()
    figures.events_seen["retried"] = 4
    assert _check(_world({}), figures=figures, resends_expected=True)[
        "lost results were recovered by re-sends"
    ]


def test_report_renders_figures_and_verdict() -> None:
    figures = RunFigures(commands_planned=10, latencies_s=[0.1, 0.2, 0.3], wall_s=2.0)
    figures.final_states["COMPLETED"] = 10
    world = _world({"amr_1": {"wms:k1": ["arrive"]}})
    invariants = check_invariants(
        world=world,
        mission_keys={("amr_1", "wms:k1")},
        items_at_start=8,
        event_identities=[],
        replay_mismatches=[],
        unfinished_keys=[],
        figures=figures,
    )
    figures.events_seen["retried"] = 3
    figures.re_sends_why.update({"lost_answer": 2, "unanswered": 1})
    figures.re_sends_answered_late = 1
    text = render(figures, invariants, world)
    assert "COMPLETED 10" in text and "p50 200 ms" in text
    assert "retried 3 (lost_answer 2, unanswered 1; 1 answered late, not lost)" in text
    assert text.strip().endswith("result: PASS")
