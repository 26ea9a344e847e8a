"""The ``vda5050`` backend passes the backend conformance kit, as any backend must: a real
agent process commanding a simulated VDA 5050 vehicle process through a real,
password-protected Mosquitto, the world simulator counting every side effect; and every
message the backend and the vehicle published matches the official VDA 5050 schemas."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.geometry import Pose
from fleet_idempotency.testing import BackendUnderTest, CommandSpec
from fleet_idempotency.testing.conformance import *  # noqa: F403 - the conformance checks

from support.vda5050_stand import make_stand, needs_mosquitto

pytestmark = needs_mosquitto


@pytest.fixture
def backend_under_test(
    conformance_env: dict[str, str], conformance_context: Any, tmp_path: Path
) -> Iterator[BackendUnderTest]:
    stand, close = make_stand(
        tmp_path, conformance_env, conformance_context, robot_id="robot_under_test", serial="C1"
    )
    try:
        yield BackendUnderTest(
            backend="vda5050",  # its entry point
            robot_type="amr",
            params=stand.backend_params(),
            completes=CommandSpec("move_to_waypoint", {"x": 1.0, "y": 0.5}),
            refused=CommandSpec("move_to_waypoint", {"waypoint": "NOWHERE"}),
            # 39 m at 1.5 m/s, 26 simulated seconds: 2.6 s at the stand's time scale.
            slow=CommandSpec("move_to_waypoint", {"x": 40.0, "y": 0.5}),
            side_effects=stand.side_effects,
            start=Pose(x=0.0, y=0.5),
            reconciles_after_crash=True,
        )
        stand.assert_every_message_matches_the_official_schemas()
    finally:
        close()
