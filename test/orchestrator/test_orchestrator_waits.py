"""Submits that wait for their result never starve the orchestrator (real processes)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fleet_idempotency.orchestrator.node import MAX_WAITING_SUBMITS

from support.fleet_harness import FleetHarness
from support.ros_support import ChildProcesses

WAIT_S = 20.0


def test_waiting_submits_are_capped_and_the_api_stays_responsive(
    ros_context: Any, ros_env: dict[str, str], children: ChildProcesses, tmp_path: Path
) -> None:
    fleet = FleetHarness(ros_context, ros_env, children, tmp_path / "stores")
    fleet.start_world()
    # No agent runs: every command stays queued, so every waiting submit waits its full
    # timeout unless the orchestrator refuses to wait.
    fleet.start_orchestrator()
    # The first calls after start-up may be lost while discovery settles (the harness
    # re-sends them); the burst below is sent once, so the path is proven first.
    assert fleet.submit("wms", "warm", "amr_1", "dock", {"dock": "D1"}).status_code == 202
    extra = 3
    sent_at = time.monotonic()
    futures = [
        fleet.submit_async("wms", f"wait-{i}", "amr_1", "dock", {"dock": "D1"}, WAIT_S)
        for i in range(MAX_WAITING_SUBMITS + extra)
    ]
    # Those past the cap are answered at once, without waiting.
    fleet.spin_until(lambda: sum(f.done() for f in futures) >= extra, "the submits past the cap")
    not_waited = [f.result() for f in futures if f.done()]
    assert len(not_waited) == extra
    assert all(a.status_code == 202 and "not waited" in a.message for a in not_waited)
    # While the others wait, the API still answers (a status check needs a free thread).
    status = fleet.fleet_check("wms", "wait-0")
    assert status.found and status.state == 1  # ACCEPTED: queued, robot offline
    assert time.monotonic() - sent_at < WAIT_S
    assert sum(f.done() for f in futures) == extra
