"""Every node executable stops cleanly on every stop a user or ``ros2 launch`` sends.

Real processes (the installed executables, which ``ros2 run`` and ``ros2 launch`` start)
and real signals: SIGINT, SIGTERM, two SIGINTs 5 ms apart (a terminal's Ctrl-C under
``ros2 launch``: the terminal's to the process group, then launch's own), and a SIGINT
during start-up, both while the node's modules still load and while its nodes are being
made. Each must end the process with exit code 0 (not the shutdown deadline's SIGALRM,
not a signal's default action) and print no traceback, no ``Exception ignored``.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_idempotency.bringup.launch_run import problem_lines
from fleet_idempotency.bringup.plan import launch_plan
from fleet_idempotency.bringup.processes import executable
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id

from support.paths import FLEET_FILE
from support.ros_support import ChildProcesses, thread_stacks, wait_for

KINDS = ("world_simulator", "orchestrator", "agent_driver", "agent_host", "http_api")
# Each kind's own line once it serves.
READY = {
    "world_simulator": "world from",
    "orchestrator": "orchestrating",
    "agent_driver": " ready: store ",
    "agent_host": " ready: store ",
    "http_api": "http_api: serving",
}
# How many of those lines: agent_host hosts two agents.
SERVING = {kind: 2 if kind == "agent_host" else 1 for kind in KINDS}
STOPS = ("sigint", "sigterm", "two_sigints", "sigint_while_loading", "sigint_while_starting")
# Well under the nodes' own shutdown deadline (parent_watch.SHUTDOWN_DEADLINE_S, 10 s):
# a node that needs it is not stopping cleanly.
EXIT_TIMEOUT_S = 8.0


def argv_for(kind: str, store_dir: Path, http_port: int = 0) -> list[str]:
    if kind == "agent_host":
        return [
            executable("agent_host"),
            "--fleet",
            str(FLEET_FILE),
            "--store-dir",
            str(store_dir),
            "--robots",
            "amr_1,arm_1",
            "--time-scale",
            "0",
        ]
    plan = launch_plan(
        load_fleet(FLEET_FILE),
        fleet_file=FLEET_FILE,
        store_dir=store_dir,
        robots=["amr_1"],
        http_port=http_port,
    )
    (spec,) = [s for s in plan if s.executable == kind]
    return [executable(kind), *spec.ros_arguments()]


@pytest.fixture(scope="module")
def world_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A domain with a world simulator in it: an agent waits for the world to start."""
    logs = tmp_path_factory.mktemp("world")
    with lease_domain_id() as domain:
        env = isolated_environment(domain)
        with (logs / "world.log").open("ab") as log:
            world = subprocess.Popen(
                argv_for("world_simulator", logs), env=env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            wait_for(
                lambda: READY["world_simulator"] in (logs / "world.log").read_text(),
                what="the world simulator",
                timeout_s=60.0,
            )
            yield env
        finally:
            world.terminate()
            world.wait(timeout=20)


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM: ``stop_signals`` installs it; Python
    alone never does."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_node_exits_0_without_a_traceback(
    kind: str,
    stop: str,
    world_env: dict[str, str],
    ros_env: dict[str, str],
    children: ChildProcesses,
    tmp_path: Path,
    free_port: int,
) -> None:
    # The world simulator gets a domain of its own, away from the one agents talk to.
    env = ros_env if kind == "world_simulator" else world_env
    process = children.spawn(kind, argv_for(kind, tmp_path / "stores", free_port), env)
    if stop.startswith("sigint_while"):
        wait_for(lambda: catches_sigterm(process.pid), what="the stop signals routed")
        if stop == "sigint_while_starting":
            # Past most imports, into rclpy.init and the nodes' construction (the world
            # simulator may be up by then: a stop right after start-up, then).
            time.sleep(0.4)
        else:
            assert READY[kind] not in children.log(kind), "not a stop during start-up"
        process.send_signal(signal.SIGINT)
    else:
        wait_for(
            lambda: children.log(kind).count(READY[kind]) == SERVING[kind],
            what=f"{kind} ready",
            timeout_s=60,
        )
        if stop == "sigterm":
            process.send_signal(signal.SIGTERM)
        else:
            process.send_signal(signal.SIGINT)
            if stop == "two_sigints":
                time.sleep(0.005)
                process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stacks = thread_stacks(process.pid)
        pytest.fail(f"{kind} up {EXIT_TIMEOUT_S} s after {stop}:\n{children.log(kind)}\n{stacks}")
    output = children.log(kind)
    assert code == 0, output
    assert not problem_lines(output), output
