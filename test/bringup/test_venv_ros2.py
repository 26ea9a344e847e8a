"""A venv made by scripts/setup.sh works with ``ros2 run`` and ``ros2 launch``.

pip puts console scripts in <venv>/bin, but ros2 looks for a package's executables in
<prefix>/lib/<package>/ and for packages through AMENT_PREFIX_PATH: the set-up links
the executables there, and the venv's activate script puts its prefix on the path.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fleet_idempotency.bringup.launch_run import Ros2Launch

from support.colcon_workspace import VENV
from support.paths import FLEET_FILE

pytestmark = pytest.mark.skipif(
    not (VENV / "bin" / "ros2").exists(),
    reason="needs the ros2 CLI in the venv (scripts/setup.sh --test installs it from "
    "../shared/ros2-jazzy-launch)",
)
NODES = ("agent_driver", "agent_host", "http_api", "orchestrator", "world_simulator")


def activated(command: str) -> list[str]:
    return ["bash", "-c", f'source "{VENV}/bin/activate" && {command}']


def outside_env(ros_env: dict[str, str]) -> dict[str, str]:
    # As in a fresh shell: nothing of this test run's own set-up.
    return {k: v for k, v in ros_env.items() if k not in ("AMENT_PREFIX_PATH", "VIRTUAL_ENV")}


def test_activating_the_venv_lets_ros2_find_the_package_and_its_nodes(
    ros_env: dict[str, str],
) -> None:
    listed = subprocess.run(
        activated("ros2 pkg executables fleet_idempotency"),
        env=outside_env(ros_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    for node in NODES:
        assert f"fleet_idempotency {node}" in listed.stdout.splitlines(), listed.stdout


def test_ros2_run_starts_a_node_that_ctrl_c_stops_with_exit_code_0(
    ros_env: dict[str, str], tmp_path: Path
) -> None:
    command = (
        f'exec ros2 run fleet_idempotency world_simulator --ros-args -p fleet_file:="{FLEET_FILE}"'
    )
    env = outside_env(ros_env)
    env["ROS_LOG_DIR"] = str(tmp_path / "ros_log")
    with Ros2Launch([], env, tmp_path / "run.log", command=activated(command)) as run:
        run.wait_until(lambda text: "world from" in text, 60, "the world simulator up")
        run.interrupt()
        outcome = run.wait(timeout_s=20)
    assert outcome.returncode == 0, run.output()
    assert not outcome.problems, run.output()
