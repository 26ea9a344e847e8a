"""The README's "For ROS users" steps, run as written: a colcon workspace with this
repository in src/, the venv made by scripts/setup.sh activated (the README's
alternative to a sourced /opt/ros/jazzy), ``colcon build``, ``source install/setup.sh``,
``ros2 launch fleet_idempotency fleet.launch.py speed:=20``; a submit completes, and a
Ctrl-C stops launch and every node with exit code 0 and no traceback.

The test adds only what keeps it apart from other runs: its own DDS domain, HTTP port,
store directory and ROS log directory. The workspace is built once per session
(support/colcon_workspace.py), shared with test_packaging.py.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from fleet_idempotency.bringup.launch_run import Ros2Launch, fleet_up

from support.colcon_workspace import VENV, ColconWorkspace
from support.paths import REPO
from support.ros_support import RERUN_ONCE_ON_A_STALLED_STOP

pytestmark = [
    pytest.mark.skipif(
        not (VENV / "bin" / "ros2").exists(),
        reason="needs the ros2 CLI in the venv (scripts/setup.sh --test installs it from "
        "../shared/ros2-jazzy-launch)",
    ),
    pytest.mark.slow,
    pytest.mark.timeout(900),  # the session's colcon build may happen in this test
]
# The README's lines this test runs, exactly as they are written there.
STEPS = (
    "colcon build",
    "source install/setup.sh",
    "ros2 launch fleet_idempotency fleet.launch.py speed:=20",
)
ROBOTS = 6


def readme_steps() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## For ROS users") :]
    block = section[section.index("```bash") : section.index("```", section.index("```bash") + 7)]
    return [line.split("  #")[0].strip() for line in block.splitlines()]


def test_the_readme_lists_the_steps_this_test_runs() -> None:
    lines = readme_steps()
    for step in STEPS:
        assert step in lines, f"README's For ROS users no longer says {step!r}"


@RERUN_ONCE_ON_A_STALLED_STOP
def test_readme_steps_build_launch_serve_and_stop_cleanly(
    colcon_workspace: ColconWorkspace, ros_env: dict[str, str], tmp_path: Path, free_port: int
) -> None:
    port = free_port
    build, source, launch = STEPS
    # `build` ran once for the session (colcon_workspace), in the same shell set-up.
    assert build == "colcon build"
    script = (
        f'source "{VENV}/bin/activate" && cd "{colcon_workspace.root}" && {source} && '
        f'exec {launch} store_dir:="{tmp_path / "stores"}" http_port:={port}'
    )
    env = {k: v for k, v in ros_env.items() if k not in ("AMENT_PREFIX_PATH", "VIRTUAL_ENV")}
    env["ROS_LOG_DIR"] = str(tmp_path / "ros_log")
    log = tmp_path / "launch.log"
    with Ros2Launch([], env, log, command=["bash", "-c", script]) as fleet:
        text = fleet.wait_until(lambda t: fleet_up(t, ROBOTS), 180, "every node up")
        # The workspace's install, not the venv's copy of the package, is what runs.
        world_line = next(line for line in text.splitlines() if "world from" in line)
        assert str(colcon_workspace.install) in world_line, world_line
        answer = submit(
            port, "amr_1", "readme-1", {"command_type": "dock", "payload": {"dock": "D1"}}
        )
        assert answer["state"] == "completed", answer
        fleet.interrupt()
        outcome = fleet.wait(timeout_s=60)
    output = fleet.output()
    assert outcome.returncode == 0, output
    assert len(outcome.exits) == ROBOTS + 3, output
    assert outcome.clean, f"{outcome.summary()}:\n" + "\n".join(outcome.problems) + output
    assert not re.search(r"process has died", output), output


def submit(port: int, robot_id: str, key: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/robots/{robot_id}/commands",
        data=json.dumps({**body, "wait_timeout_sec": 30}).encode(),
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
        method="POST",
    )
    deadline_s = 120
    with urllib.request.urlopen(request, timeout=deadline_s) as reply:
        assert reply.status == 200
        answer: dict[str, object] = json.loads(reply.read())
        return answer
