"""The worked example backend (examples/fleet_idem_charger), as a robot integrator ships
one: built and installed by pip from its own distribution into a directory of its own,
found by the agent through its entry point, passing the conformance kit, and driven by
a real agent process started as on a robot (no world simulator, no orchestrator)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleet_idempotency.geometry import Pose
from fleet_idempotency.testing import BackendUnderTest, CommandSpec
from fleet_idempotency.testing.conformance import *  # noqa: F403 - the conformance checks

from support.paths import REPO

EXAMPLE = REPO / "examples" / "fleet_idem_charger"


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example distribution, installed by pip (wheel built from its pyproject) into a
    directory that only the agent processes of these tests have on their path."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(EXAMPLE),
        ],
        check=True,
        capture_output=True,
        # A build in the source folder would leave build/ and *.egg-info behind.
        cwd=tmp_path_factory.getbasetemp(),
    )
    assert list(target.glob("fleet_idem_charger-*.dist-info/entry_points.txt"))
    return target


def actuations(log: Path, key: str) -> int:
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if json.loads(line)["key"] == key)


@pytest.fixture
def backend_under_test(installed_example: Path, tmp_path: Path) -> BackendUnderTest:
    log = tmp_path / "charger_actuations.jsonl"
    return BackendUnderTest(
        backend="charger",  # its entry point's name: nothing of it is imported here
        robot_type="charger",
        params={"bays": ["D1", "D2"], "actuation_log": str(log), "charge_s": 2.0},
        completes=CommandSpec("dock", {"dock": "D1"}),
        refused=CommandSpec("dock", {"dock": "D9"}),
        slow=CommandSpec("dock", {"dock": "D2"}),
        side_effects=lambda key: actuations(log, key),
        env={"PYTHONPATH": str(installed_example)},
        robot_id="charger_1",
        start=Pose(x=30.0, y=2.0),
    )
