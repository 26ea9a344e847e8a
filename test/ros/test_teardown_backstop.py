"""A DDS participant's teardown that deadlocks with the GIL held ends in exit 0, with the
reason printed, once the node's own shutdown has finished (ros/teardown_backstop.py).

The Fast DDS deadlock itself needs a discovery callback in progress at one instant: the
last test forces it with gdb (``bench/repro_participant_teardown.py``), against the real
Fast DDS; the others make the teardown block in native code holding the GIL, which is
what that deadlock looks like to the process: no Python thread runs again. Real
processes, real signals.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from fleet_idempotency.bringup.system_tools import GDB, MissingSystemTool

from support.paths import REPO
from support.ros_support import ChildProcesses, wait_for

# Blocks for good in C with the GIL held: ctypes.PyDLL does not release it.
HOLD_THE_GIL = "import ctypes; ctypes.PyDLL(None).pause()"

BACKSTOP_FIRES = f"""
from fleet_idempotency.ros.teardown_backstop import participant_teardown_backstop
print("tearing down", flush=True)
with participant_teardown_backstop("stuck_node", limit_s=0.5):
    {HOLD_THE_GIL}
"""

BACKSTOP_DISARMED = """
import time
from fleet_idempotency.ros.teardown_backstop import participant_teardown_backstop
with participant_teardown_backstop("quick_node", limit_s=0.3):
    pass
time.sleep(1.0)  # well past the limit: a timer left armed would have ended the process
print("still running", flush=True)
raise SystemExit(7)
"""

NODE_WHOSE_TEARDOWN_HANGS = f"""
from rclpy.node import Node
from fleet_idempotency.ros.node_main import run_nodes

class StuckTeardown(Node):
    def shutdown(self):
        print("own shutdown finished", flush=True)

    def destroy_node(self):
        {HOLD_THE_GIL}

def make():
    node = StuckTeardown("stuck_teardown", start_parameter_services=False)
    print("ready", flush=True)
    return [node]

run_nodes("stuck_teardown", make)
"""


def run_script(script: str, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_a_teardown_that_holds_the_gil_for_good_ends_in_exit_0_with_the_reason() -> None:
    finished = run_script(BACKSTOP_FIRES)
    assert finished.returncode == 0, finished
    assert finished.stdout.startswith("tearing down\n"), finished.stdout
    reason = "stuck_node: the DDS participant's teardown did not finish in 0.5 s"
    assert reason in finished.stdout
    assert "eProsima/Fast-DDS#6513" in finished.stdout


def test_a_teardown_that_finishes_disarms_the_backstop() -> None:
    finished = run_script(BACKSTOP_DISARMED)
    assert finished.returncode == 7, finished
    assert finished.stdout == "still running\n"


def test_a_node_whose_participant_teardown_hangs_exits_0_after_its_own_shutdown(
    ros_env: dict[str, str], children: ChildProcesses
) -> None:
    # Without the backstop this process would spin until the 10 s shutdown deadline
    # (SIGALRM, exit -14), as about one node stop in 200-500 did under ros2 launch.
    children.spawn("stuck", [sys.executable, "-c", NODE_WHOSE_TEARDOWN_HANGS], ros_env)
    wait_for(lambda: "ready" in children.log("stuck"), what="the node to start")
    assert children.kill("stuck", signal.SIGINT) == 0, children.log("stuck")
    log = children.log("stuck")
    assert log.index("own shutdown finished") < log.index("teardown did not finish in 3 s")


@pytest.mark.skipif(not GDB.available(), reason=str(MissingSystemTool(GDB)))
def test_the_real_fast_dds_teardown_deadlock_hangs_without_the_backstop_and_not_with_it() -> None:
    forced = subprocess.run(
        [sys.executable, str(REPO / "bench" / "repro_participant_teardown.py"), "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert forced.returncode == 0, forced.stderr[-3000:]
    rows = {
        line.split()[0]: line.split()
        for line in forced.stdout.splitlines()
        if line.startswith(("plain ", "backstop "))
    }
    # Columns: variant, run, exit, seconds after release, spin seen, output.
    assert rows["plain"][4] == "True", forced.stdout  # the race was forced
    assert rows["plain"][2] == "SIGALRM", forced.stdout  # Fast DDS deadlocked
    assert rows["backstop"][4] == "True", forced.stdout
    assert rows["backstop"][2] == "0", forced.stdout
    assert "eProsima/Fast-DDS#6513" in forced.stdout
