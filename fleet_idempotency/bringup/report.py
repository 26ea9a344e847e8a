"""The demo's end-of-run report and its invariants, from plain data. No ROS imports.

The invariants are what the package exists for; the demo exits non-zero if any fails:
no key executed twice (the world's oracle), no accepted command lost, pallets neither
created nor destroyed, the event log free of duplicates and equal to the store on replay.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Invariant:
    name: str
    ok: bool
    detail: str


@dataclass
class RunFigures:
    """Everything counted during a run, filled in by the demo."""

    commands_planned: int = 0
    submit_calls: int = 0
    client_resubmits: int = 0
    final_states: Counter[str] = field(default_factory=Counter)
    answer_codes: Counter[int] = field(default_factory=Counter)
    latencies_s: list[float] = field(default_factory=list)
    replays_verified: int = 0
    replay_mismatches: int = 0
    mismatches_injected: int = 0
    mismatches_rejected: int = 0
    robot_crashes: int = 0
    orchestrator_crashes: int = 0
    # VDA 5050 vehicles: kill -9s of simulated vehicles, broker restarts, and order
    # publishes the vehicles were told to lose.
    vehicle_crashes: int = 0
    broker_restarts: int = 0
    orders_dropped: int = 0
    # Restarts by the supervisor, by process name: every crash should be one, and any
    # restart beyond the crashes is a node that died on its own.
    restarts: Counter[str] = field(default_factory=Counter)
    reconciliations: int = 0
    unexpected: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    results_seen: Counter[str] = field(default_factory=Counter)
    events_seen: Counter[str] = field(default_factory=Counter)
    # The orchestrator's re-sends by the rule that made them (retried events' "why"), and
    # how many of them were needless: their command's answer to an earlier send settled it.
    re_sends_why: Counter[str] = field(default_factory=Counter)
    re_sends_answered_late: int = 0
    wall_s: float = 0.0


def percentile(samples: list[float], fraction: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def check_invariants(
    *,
    world: dict[str, Any],
    mission_keys: set[tuple[str, str]],
    items_at_start: int,
    event_identities: list[tuple[str, str, str, str]],
    replay_mismatches: list[str],
    unfinished_keys: list[str],
    figures: RunFigures,
    resends_expected: bool = False,
) -> list[Invariant]:
    """``mission_keys``: (robot, robot-side key) of every command the mission submitted;
    ``resends_expected``: results were dropped on purpose, so the orchestrator must have
    re-sent (a run whose faults silently did nothing proves nothing)."""
    effects: dict[str, dict[str, list[str]]] = world.get("side_effects", {})
    repeated = sorted(
        f"{robot}/{key}: {actions}"
        for robot, keys in effects.items()
        for key, actions in keys.items()
        if len(actions) > 1
    )
    max_effects = world.get("max_side_effects_per_key", 0)
    unknown = sorted(
        f"{robot}/{key}"
        for robot, keys in effects.items()
        for key in keys
        if (robot, key) not in mission_keys
    )
    duplicate_events = len(event_identities) - len(set(event_identities))
    items = world.get("items_total", 0)
    resent = figures.events_seen["retried"]
    invariants = [
        Invariant(
            "at most one execution per key (world oracle)",
            max_effects <= 1,
            f"max side effects per key = {max_effects}"
            + (f"; repeated: {repeated[:5]}" if repeated else ""),
        ),
        Invariant(
            "only the mission's keys acted",
            not unknown,
            f"{len(unknown)} unknown keys" + (f": {unknown[:5]}" if unknown else ""),
        ),
        Invariant(
            "every accepted command reached a final state",
            not unfinished_keys,
            f"{len(unfinished_keys)} unfinished"
            + (f": {unfinished_keys[:5]}" if unfinished_keys else ""),
        ),
        Invariant(
            "pallets and items conserved",
            items == items_at_start,
            f"{items} in the world, {items_at_start} at start",
        ),
        Invariant(
            "no pick from an empty slot or place onto an occupied one",
            world.get("failed_actions", 0) == 0,
            f"{world.get('failed_actions', 0)} failed physical actions",
        ),
        Invariant(
            "event log has no duplicate event",
            duplicate_events == 0,
            f"{len(event_identities)} events, {duplicate_events} duplicates",
        ),
        Invariant(
            "event log replay equals the orchestrator's store",
            not replay_mismatches,
            "equal" if not replay_mismatches else f"differs: {replay_mismatches[:5]}",
        ),
        Invariant(
            "retried submits replay the same final body",
            figures.replay_mismatches == 0,
            f"{figures.replays_verified} replays verified, {figures.replay_mismatches} differed",
        ),
        Invariant(
            "reused keys with another payload are refused (422)",
            figures.mismatches_rejected == figures.mismatches_injected,
            f"{figures.mismatches_rejected}/{figures.mismatches_injected} refused",
        ),
        # The simulation has no failure mode of its own: a FAILED command means a lost
        # world action or a plan gone wrong, both worth a red line.
        Invariant(
            "no command failed",
            not figures.failures,
            f"{len(figures.failures)} failed"
            + (f": {figures.failures[:3]}" if figures.failures else ""),
        ),
        Invariant(
            "no unexpected answer",
            not figures.unexpected,
            f"{len(figures.unexpected)} unexpected"
            + (f": {figures.unexpected[:3]}" if figures.unexpected else ""),
        ),
    ]
    crashes = figures.robot_crashes + figures.orchestrator_crashes + figures.vehicle_crashes
    restarts = sum(figures.restarts.values())
    invariants.append(
        Invariant(
            "every killed process was restarted by the supervisor",
            restarts >= crashes,
            f"{restarts} restarts for {crashes} kills"
            + (f" ({restarts - crashes} exits nobody caused)" if restarts > crashes else ""),
        )
    )
    if resends_expected:
        invariants.append(
            Invariant(
                "lost results were recovered by re-sends",
                resent > 0,
                f"{resent} re-sends by the orchestrator",
            )
        )
    return invariants


def _re_sends_detail(figures: RunFigures) -> str:
    if not figures.re_sends_why:
        return ""
    why = ", ".join(f"{reason} {count}" for reason, count in figures.re_sends_why.most_common())
    return f" ({why}; {figures.re_sends_answered_late} answered late, not lost)"


def render(figures: RunFigures, invariants: list[Invariant], world: dict[str, Any]) -> str:
    lat = figures.latencies_s
    keys_with_effects = world.get("keys_with_side_effects", 0)
    max_effects = world.get("max_side_effects_per_key", 0)
    events = figures.events_seen
    lines = [
        "",
        "=== fleet_idempotency demo report ===",
        f"commands            {figures.commands_planned} planned in {figures.wall_s:.1f} s "
        f"({figures.commands_planned / max(figures.wall_s, 1e-9):.1f}/s)",
        "final states        "
        + ", ".join(f"{k} {v}" for k, v in sorted(figures.final_states.items())),
        f"submit calls        {figures.submit_calls} (client re-sends {figures.client_resubmits},"
        f" deliberate retries verified {figures.replays_verified})",
        f"orchestrator        dispatched {events['dispatched']}, retried {events['retried']}"
        f"{_re_sends_detail(figures)}, "
        f"duplicates suppressed {events['duplicate_suppressed']}, "
        f"mismatches rejected {events['mismatch_rejected']}, busy {events['busy']}",
        f"robots answered     replays {figures.results_seen['replayed']}, in progress (409) "
        f"{figures.results_seen['409']}, busy (429) {figures.results_seen['429']}, "
        f"interrupted {figures.results_seen['interrupted']}",
        f"faults injected     results dropped, deliveries duplicated and reordered at the "
        f"configured rates; robot crashes {figures.robot_crashes}, orchestrator crashes "
        f"{figures.orchestrator_crashes}, mismatching reuses {figures.mismatches_injected}",
        (
            f"VDA 5050 faults     order publishes lost {figures.orders_dropped}, vehicle "
            f"crashes {figures.vehicle_crashes}, broker restarts {figures.broker_restarts}"
            if figures.orders_dropped or figures.vehicle_crashes or figures.broker_restarts
            else ""
        ),
        "supervisor          restarts "
        + (", ".join(f"{n} {c}" for n, c in sorted(figures.restarts.items())) or "none"),
        f"reconciliations     {figures.reconciliations} (after interrupted or refused pick/place)",
        f"world oracle        {keys_with_effects} keys acted, max side effects per key "
        f"{max_effects}",
        f"latency submit->final  p50 {percentile(lat, 0.5) * 1e3:.0f} ms, "
        f"p90 {percentile(lat, 0.9) * 1e3:.0f} ms, p99 {percentile(lat, 0.99) * 1e3:.0f} ms, "
        f"max {max(lat, default=float('nan')) * 1e3:.0f} ms",
        f"  (mean {statistics.fmean(lat) * 1e3:.0f} ms over {len(lat)} commands)" if lat else "",
        "invariants:",
    ]
    lines += [f"  [{'ok' if inv.ok else 'FAIL'}] {inv.name}: {inv.detail}" for inv in invariants]
    verdict = "PASS" if all(inv.ok for inv in invariants) else "FAIL"
    lines.append(f"result: {verdict}")
    return "\n".join(line for line in lines if line != "")
