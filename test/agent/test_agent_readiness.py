"""An agent starts whatever else is up: it waits for its backend instead of aborting,
serves its store meanwhile, refuses new commands before any side effect, and runs them
once the backend is ready. Nodes start in any order. A start-up error that cannot be
waited out is one line and exit code 1. Real processes over real DDS throughout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet_idempotency.orchestrator.dispatch import robot_key

from support.fleet_harness import BIN, FleetHarness
from support.http_harness import HttpServer
from support.paths import SUPPORT
from support.ros_support import ChildProcesses, wait_for

NOT_READY = 503
REJECTED, COMPLETED = 6, 3


def harness(
    ros_context: Any, ros_env: dict[str, str], children: ChildProcesses, tmp: Path
) -> FleetHarness:
    return FleetHarness(ros_context, ros_env, children, tmp / "stores")


def test_an_agent_without_its_world_waits_serves_and_refuses_then_runs(
    ros_context: Any, ros_env: dict[str, str], children: ChildProcesses, tmp_path: Path
) -> None:
    fleet = harness(ros_context, ros_env, children, tmp_path)
    # As on a robot: no world simulator and no orchestrator on the network.
    fleet.start_agent("forklift_1", "forklift", start_x=2.0, start_y=4.0, wait_ready=False)
    status = fleet.statuses["forklift_1"]
    assert not status.ready and "world simulator" in status.waiting_for
    assert not fleet.check_key("forklift_1", "pick-1").found  # CheckKey is served

    fleet.send("forklift_1", "pick-1", "pick", {"slot": "A1"})
    refusal = fleet.answer_to("pick-1", 1)
    assert (refusal.state, refusal.status_code) == (REJECTED, NOT_READY)
    assert "not ready: waiting for the world simulator" in refusal.message
    assert not fleet.check_key("forklift_1", "pick-1").found  # released: nothing stored

    # Well past the old 30 s abort is not needed to show it stays up: it keeps serving
    # and says what it waits for once, not on every probe.
    agent = children.processes["agent_forklift_1"]
    fleet.spin_until(
        lambda: "waiting for the world simulator" in children.log("agent_forklift_1"),
        "the agent to say what it waits for",
    )
    assert agent.poll() is None
    assert children.log("agent_forklift_1").count("waiting for the world simulator") <= 2

    fleet.start_world()
    fleet.spin_until(lambda: fleet.statuses["forklift_1"].ready, "the agent to become ready")
    assert fleet.statuses["forklift_1"].waiting_for == ""
    fleet.send("forklift_1", "pick-1", "pick", {"slot": "A1"}, attempt=2)
    final = fleet.final("pick-1")
    assert final.state == COMPLETED, final.message
    assert fleet.side_effects("forklift_1", "pick-1") == 1
    assert agent.poll() is None


def test_nodes_start_in_any_order(
    ros_context: Any,
    ros_env: dict[str, str],
    children: ChildProcesses,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """HTTP API, then orchestrator, then agent, then world: a submit made before the
    robot can act is held, not failed, and completes once everything is up."""
    fleet = harness(ros_context, ros_env, children, tmp_path)
    http = HttpServer(fleet)
    request.addfinalizer(http.release_port)
    http.start(auth=False, ready=False)
    assert httpx.get(f"{http.base_url}/readyz", timeout=5).status_code == 503
    fleet.start_orchestrator()
    wait_for(
        lambda: httpx.get(f"{http.base_url}/readyz", timeout=5).status_code == 200,
        what="the HTTP API to see the orchestrator",
        timeout_s=60,
    )
    # An integer for the float time_scale, as a hand-written -p gives it: accepted.
    fleet.start_agent("amr_1", "amr", wait_ready=False, time_scale=0)
    assert not fleet.statuses["amr_1"].ready
    queued = fleet.submit("wms", "order-1", "amr_1", "dock", '{"dock": "D1"}')
    assert queued.status_code == 202, queued.message
    fleet.start_world()
    final = fleet.wait_final("wms", "order-1")
    assert final.state == COMPLETED, final.message
    assert fleet.side_effects("amr_1", robot_key("wms", "order-1")) == 1
    for name, process in children.processes.items():
        assert process.poll() is None, f"{name} exited"


BLOCK_SIM = """
import importlib.abc, sys

class NoSimulator(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "fleet_idempotency.sim" or name.startswith("fleet_idempotency.sim."):
            raise ImportError(f"{name} is not available on this robot")
        return None

sys.meta_path.insert(0, NoSimulator())
"""


def test_the_agent_imports_and_runs_without_the_simulator_package(
    ros_context: Any, ros_env: dict[str, str], children: ChildProcesses, tmp_path: Path
) -> None:
    """The agent package (node, core, host) knows only the backend interface: with
    ``fleet_idempotency.sim`` unimportable, an agent with a non-simulated backend runs
    as its own process and executes commands."""
    import subprocess

    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            BLOCK_SIM + "import fleet_idempotency.agent.node, fleet_idempotency.agent.host\n"
            "assert not any(m.startswith('fleet_idempotency.sim') for m in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert imported.returncode == 0, imported.stderr
    env = {**ros_env, "PYTHONPATH": str(SUPPORT.parent)}
    fleet = harness(ros_context, env, children, tmp_path)
    launcher = BLOCK_SIM + "from fleet_idempotency.agent.node import main\nmain()\n"
    args = [
        sys.executable,
        "-c",
        launcher,
        "--ros-args",
        "-r",
        "__ns:=/fleet/conveyor_1",
        "-p",
        "robot_id:=conveyor_1",
        "-p",
        "robot_type:=conveyor",
        "-p",
        "backend:=support.backends.samples:Sample",
        "-p",
        "backend_params.serial:=SN-1",
        "-p",
        f"store_dir:={tmp_path / 'stores'}",
    ]
    children.spawn("agent_conveyor_1", args, env)
    fleet.track_robot("conveyor_1")
    fleet.spin_until(lambda: fleet.ready("conveyor_1"), "the conveyor's agent", timeout_s=60)
    fleet.send("conveyor_1", "transfer-1", "pick", {"slot": "S1"})
    final = fleet.final("transfer-1")
    assert final.state == COMPLETED, final.message
    assert "not available on this robot" not in children.log("agent_conveyor_1")


@pytest.mark.parametrize(
    ("executable", "parameters", "message"),
    [
        ("agent_driver", ["backend:=no_such_backend"], "backend 'no_such_backend' not found"),
        (
            "agent_driver",
            ["backend_params.time_scale:=-1.0"],
            "backend_params.time_scale: Input should be greater than or equal to 0",
        ),
        (
            "agent_driver",
            ["backend_params.colour:=red"],
            "backend 'simulated' has no parameter(s) backend_params.colour (it takes: time_scale)",
        ),
        ("agent_driver", ["robot_type:=submarine"], "drives robot types"),
        ("agent_driver", ["capacity:=0"], "capacity must be at least 1"),
        ("agent_driver", ["store_dir:=STORE_IS_A_FILE"], "store"),
        ("orchestrator", ["fleet_file:=/nonexistent/fleet.yaml"], "cannot read fleet file"),
        ("world_simulator", ["fleet_file:=/nonexistent/fleet.yaml"], "cannot read fleet file"),
        ("http_api", ["fleet_file:=/nonexistent/fleet.yaml"], "cannot read fleet file"),
    ],
)
def test_startup_errors_are_one_line_and_exit_code_1(
    ros_env: dict[str, str],
    children: ChildProcesses,
    tmp_path: Path,
    executable: str,
    parameters: list[str],
    message: str,
) -> None:
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("a file where the store's directory should be")
    arguments = [str(BIN / executable), "--ros-args"]
    for parameter in parameters:
        arguments += ["-p", parameter.replace("STORE_IS_A_FILE", str(blocker))]
    if executable == "agent_driver" and not any(p.startswith("store_dir") for p in parameters):
        arguments += ["-p", f"store_dir:={tmp_path / 'stores'}"]
    process = children.spawn(executable, arguments, ros_env)
    assert process.wait(timeout=60) == 1
    log = children.log(executable)
    assert message in log
    assert f"{executable}: cannot start:" in log
    assert "Traceback" not in log and "Aborted" not in log
