"""One colcon workspace of this repository per test session, built the README's way.

A colcon build of the package takes ~2 minutes on two cores (rosidl through CMake);
the packaging test and the README's "For ROS users" test share this one. The build runs
the README's lines: the venv made by scripts/setup.sh activated (in place of a sourced
/opt/ros/jazzy), then ``colcon build`` in the workspace.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.paths import REPO

VENV = Path(sys.prefix)


@dataclass(frozen=True)
class ColconWorkspace:
    root: Path  # the README's ~/fleet_ws

    @property
    def install(self) -> Path:
        return self.root / "install"

    @property
    def scripts(self) -> Path:
        return self.install / "fleet_idempotency" / "lib" / "fleet_idempotency"


def copy_sources(destination: Path) -> None:
    """Copy what a clone of the repository holds (tracked and new files, not ignored ones)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for relative in listed:
        source = REPO / relative
        if source.is_file():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def run_checked(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, check=False, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, (
        f"{argv} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="session")
def colcon_workspace(tmp_path_factory: pytest.TempPathFactory) -> ColconWorkspace:
    if not (VENV / "bin" / "colcon").exists():
        pytest.skip("colcon is not installed (scripts/setup.sh --test installs it)")
    root = tmp_path_factory.mktemp("colcon") / "fleet_ws"
    copy_sources(root / "src" / "fleet_idempotency")  # the README's git clone
    run_checked(
        [
            "bash",
            "-c",
            f'source "{VENV}/bin/activate" && colcon build --event-handlers console_direct-',
        ],
        cwd=root,
    )
    return ColconWorkspace(root)
