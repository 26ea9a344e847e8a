"""The launch files under the real ROS 2 launch stack: ``launch_test`` runs the
launch_testing checks in ``launch_checks/`` (each in a process of its own), and
``ros2 launch`` runs as a user's terminal does, Ctrl-C included.

Needs ``launch``, ``launch_testing`` and the ``ros2`` CLI in this environment:
``scripts/setup.sh --test`` installs them from ../shared/ros2-jazzy-launch when that
folder exists, and a sourced ROS 2 Jazzy has them; elsewhere this module skips, saying
why. Each test leases its own DDS domain, takes a free HTTP port, and keeps its stores
and ROS logs in its own temporary directory.

    .venv/bin/pytest test/bringup/test_launch.py
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet_idempotency.bringup.launch_run import PROBLEM, Ros2Launch, fleet_up, ros2_executable
from fleet_idempotency.bringup.plan import RESPAWN_DELAY_S

from support.ros_support import RERUN_ONCE_ON_A_STALLED_STOP

CHECKS = Path(__file__).resolve().parent / "launch_checks"
LAUNCH_TEST = Path(sys.executable).with_name("launch_test")
MISSING = [
    name
    for name, present in (
        ("launch_testing", importlib.util.find_spec("launch_testing") is not None),
        ("launch_ros", importlib.util.find_spec("launch_ros") is not None),
        ("the launch_test CLI", LAUNCH_TEST.exists()),
        ("the ros2 CLI", ros2_executable() is not None),
    )
    if not present
]
pytestmark = [
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"needs the ROS 2 launch stack; missing {', '.join(MISSING)} "
        "(scripts/setup.sh --test installs it from ../shared/ros2-jazzy-launch)",
    ),
    pytest.mark.slow,
    # A fleet of nine processes on two shared cores, started more than once.
    pytest.mark.timeout(600),
]
ROBOTS = 6


@pytest.fixture
def launch_env(ros_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The test's domain, this venv's packages on AMENT_PREFIX_PATH (where ros2 launch
    finds fleet_idempotency), ROS logs in the test's directory."""
    env = dict(ros_env)
    env["AMENT_PREFIX_PATH"] = os.pathsep.join(
        dict.fromkeys(filter(None, [sys.prefix, *env.get("AMENT_PREFIX_PATH", "").split(":")]))
    )
    env["ROS_LOG_DIR"] = str(tmp_path / "ros_log")
    return env


def run_launch_test(checks: str, arguments: list[str], env: dict[str, str], log: Path) -> None:
    """``launch_test`` on one checks file; fails the test with its output when it fails."""
    with log.open("wb") as sink:
        result = subprocess.run(
            [str(LAUNCH_TEST), str(CHECKS / checks), *arguments],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=540,
            check=False,
        )
    output = log.read_text(errors="replace")
    assert result.returncode == 0, f"launch_test {checks} exited {result.returncode}:\n{output}"


@RERUN_ONCE_ON_A_STALLED_STOP
def test_fleet_launch_serves_submits_respawns_and_stops_cleanly(
    launch_env: dict[str, str], tmp_path: Path, free_port: int
) -> None:
    port = free_port
    run_launch_test(
        "fleet_checks.py",
        [f"store_dir:={tmp_path / 'stores'}", f"http_port:={port}"],
        launch_env,
        tmp_path / "launch_test.log",
    )


def test_robot_launch_alone_waits_for_world_and_orchestrator(
    launch_env: dict[str, str], tmp_path: Path
) -> None:
    run_launch_test(
        "robot_checks.py",
        [f"store_dir:={tmp_path / 'stores'}"],
        launch_env,
        tmp_path / "launch_test.log",
    )


@RERUN_ONCE_ON_A_STALLED_STOP
def test_ctrl_c_stops_launch_and_every_node_with_exit_code_0(
    launch_env: dict[str, str], tmp_path: Path, free_port: int
) -> None:
    port = free_port
    arguments = [
        "fleet_idempotency",
        "fleet.launch.py",
        f"store_dir:={tmp_path / 'stores'}",
        f"http_port:={port}",
        "speed:=20",
    ]
    with Ros2Launch(arguments, launch_env, tmp_path / "launch.log") as launch:
        launch.wait_until(lambda text: fleet_up(text, ROBOTS), 180, "every node up")
        launch.interrupt()  # one Ctrl-C: the terminal's SIGINT to the process group
        outcome = launch.wait(timeout_s=60)
    output = launch.output()
    assert outcome.returncode == 0, output
    assert len(outcome.exits) == ROBOTS + 3, output  # agents, world, orchestrator, HTTP
    assert outcome.clean, f"{outcome.summary()}:\n" + "\n".join(outcome.problems) + output


@pytest.mark.skipif(
    shutil.which("gz") is not None, reason="Gazebo is installed: test_gazebo_sim.py runs it"
)
def test_gazebo_fleet_without_gazebo_says_so_once_and_exits_1(
    launch_env: dict[str, str], tmp_path: Path
) -> None:
    ros2 = ros2_executable()
    assert ros2 is not None
    store = tmp_path / "stores"
    result = subprocess.run(
        [ros2, "launch", "fleet_idempotency", "gazebo_fleet.launch.py", f"store_dir:={store}"],
        env=launch_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    errors = [line for line in output.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1, output
    assert "ros_gz_sim" in errors[0], output
    assert not PROBLEM.search(output), output


def test_a_node_that_cannot_start_is_not_respawned(
    launch_env: dict[str, str], tmp_path: Path
) -> None:
    """robot.launch.py whose store cannot be created: the agent says so once and exits 1,
    and launch does not respawn it (a respawn would fail the same way, for ever)."""
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("a file where the store's directory should be")
    arguments = [
        "fleet_idempotency",
        "robot.launch.py",
        "robot_id:=forklift_1",
        f"store_dir:={blocker}",
    ]
    with Ros2Launch(arguments, launch_env, tmp_path / "launch.log") as launch:
        launch.wait_until(lambda text: "not respawned" in text, 120, "the agent given up")
        # Showing that something does not happen takes a window: twice launch's respawn
        # delay, by the end of which a respawn would have started.
        time.sleep(2 * RESPAWN_DELAY_S)
        launch.interrupt()
        outcome = launch.wait(timeout_s=60)
    output = launch.output()
    assert output.count("process started with pid") == 1, output
    assert output.count("agent_driver: cannot start:") == 1, output
    assert "exit code 1" in output and "Traceback" not in output, output
    assert outcome.returncode == 0, output
