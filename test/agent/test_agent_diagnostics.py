"""An agent's store counters on /diagnostics, as ROS monitoring tools read them."""

from __future__ import annotations

from typing import Any

from fleet_idempotency.agent.diagnostics import (
    OK,
    PERIOD_S,
    REFRESH_PERIODS,
    WARN,
    rotation,
    store_status,
)

from support.fleet_harness import FleetHarness


def test_level_and_message_follow_the_store() -> None:
    stats = {"records": 3, "in_flight": 1, "claims": 3, "used_bytes": 10, "claim_limit_bytes": 100}
    level, message, values = store_status(stats, {"replays": 2})
    assert level == OK and message == "3 keys, 1 in flight"
    assert ("records", "3") in values and ("agent.replays", "2") in values
    assert store_status({**stats, "used_bytes": 90}, {})[0] == WARN
    assert store_status({**stats, "store_full": 1}, {})[0] == WARN


def test_agent_publishes_its_store_on_diagnostics(fleet: FleetHarness) -> None:
    from diagnostic_msgs.msg import DiagnosticArray

    arrays: list[Any] = []
    fleet.node.create_subscription(DiagnosticArray, "/diagnostics", arrays.append, 10)
    fleet.start_agent("amr_1", "amr")
    fleet.send("amr_1", "diag-1", "dock", {"dock": "D1"})
    fleet.final("diag-1")

    def claims_seen() -> dict[str, str] | None:
        for array in reversed(arrays):
            for status in array.status:
                values = {pair.key: pair.value for pair in status.values}
                # Published periodically: one may come between the claim and the finish.
                if status.hardware_id == "amr_1" and values.get("finishes") == "1":
                    assert status.name == "/fleet/amr_1/agent_driver: idempotency store"
                    assert status.level == b"\x00"
                    return values
        return None

    values = fleet.spin_until(claims_seen, "a diagnostic status counting the claim")
    assert values["records"] == "1" and values["claims"] == "1"


def test_a_large_host_reports_each_robot_every_few_periods_a_small_one_every_period() -> None:
    assert rotation(3, 0) == (range(3), 0)
    assert rotation(4, 0) == (range(4), 0)
    seen: list[int] = []
    cursor = 0
    for _ in range(REFRESH_PERIODS):
        indices, cursor = rotation(10, cursor)
        assert len(indices) == 3  # ceil(10 / 4)
        seen += [index % 10 for index in indices]
    assert set(seen) == set(range(10)), "every robot within REFRESH_PERIODS periods"
    assert REFRESH_PERIODS * PERIOD_S < 5.0, "inside diagnostic_aggregator's stale timeout"
