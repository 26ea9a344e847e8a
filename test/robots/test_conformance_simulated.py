"""The package's own simulated backend passes the backend conformance kit, as any
third-party backend must (fleet_idempotency/testing/conformance.py): a real agent process,
a real world simulator counting every side effect, real signals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.geometry import Pose
from fleet_idempotency.testing import BackendUnderTest, CommandSpec
from fleet_idempotency.testing.conformance import *  # noqa: F403 - the conformance checks

from support.fleet_harness import BIN, FLEET_FILE
from support.ros_support import RERUN_ONCE_ON_A_STALLED_STOP, ChildProcesses
from support.world_oracle import WorldOracle

# A stop takes 0.2 s here; the stall the rerun is for would fail the kit's 5 s limit by 0.2 s.
test_conformance_shutdown_aborts_a_running_command_promptly = RERUN_ONCE_ON_A_STALLED_STOP(
    test_conformance_shutdown_aborts_a_running_command_promptly  # noqa: F405 - the kit's
)

# 40 m at an AMR's 1.5 m/s is ~27 simulated seconds: 2.7 s at this scale, long enough to
# catch the command running; short moves take a few ms.
TIME_SCALE = 0.1


@pytest.fixture
def backend_under_test(
    conformance_env: dict[str, str], conformance_context: Any, tmp_path: Path
) -> Iterator[BackendUnderTest]:
    world = ChildProcesses(tmp_path)
    world.spawn(
        "world",
        [str(BIN / "world_simulator"), "--ros-args", "-p", f"fleet_file:={FLEET_FILE}"],
        conformance_env,
    )
    oracle = WorldOracle(conformance_context)
    try:
        oracle.wait_ready()
        yield BackendUnderTest(
            backend="simulated",
            robot_type="amr",
            params={"time_scale": TIME_SCALE},
            completes=CommandSpec("move_to_waypoint", {"x": 1.0, "y": 0.5}),
            refused=CommandSpec("move_to_waypoint", {"waypoint": "NOWHERE"}),
            slow=CommandSpec("move_to_waypoint", {"x": 40.0, "y": 0.5}),
            side_effects=lambda key: oracle.side_effects("robot_under_test", key),
            start=Pose(x=0.0, y=0.5),
        )
    finally:
        oracle.close()
        world.stop_all()
