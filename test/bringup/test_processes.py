"""Supervision and parent death for the processes `fleet-idem up`/`demo` start.

Real processes and real signals: children are small Python programs; the parent-watch
test runs FleetProcesses in a parent process of its own and SIGKILLs that parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from fleet_idempotency.bringup import processes as processes_module
from fleet_idempotency.bringup.processes import FleetProcesses, Restart

from support.ros_support import wait_for

# A child that behaves like a node under fleet-idem: it watches its parent pipe and exits
# cleanly on SIGTERM.
CHILD = textwrap.dedent(
    """
    import signal, sys, threading
    from fleet_idempotency.ros.parent_watch import watch_parent
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    watch_parent()
    print("up", flush=True)
    stop.wait()
    sys.exit(0)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def test_a_killed_child_is_restarted_counted_and_reported(tmp_path: Path) -> None:
    restarts: list[Restart] = []
    seen = threading.Event()

    def on_restart(restart: Restart) -> None:
        restarts.append(restart)
        seen.set()

    fleet = FleetProcesses(
        tmp_path / "logs", dict(os.environ), respawn_delay_s=0.05, on_restart=on_restart
    )
    try:
        fleet.start("node", [sys.executable, "-c", CHILD])
        first = fleet.children["node"].process.pid
        wait_for(lambda: "up" in fleet.log_tail("node"), timeout_s=30, what="the child to start")
        fleet.crash("node")
        assert fleet.wait_restarted("node", 1, timeout_s=30)
        assert seen.wait(5)
        assert fleet.alive("node") and fleet.children["node"].process.pid != first
        assert restarts == [Restart("node", -signal.SIGKILL, 1, 0.05)]
        wait_for(
            lambda: fleet.log_tail("node").split().count("up") == 2,
            timeout_s=30,
            what="the restarted child to be up",
        )
    finally:
        codes = fleet.stop_all()
    assert codes == {"node": 0}, "stopped by SIGTERM, cleanly, and not restarted"
    assert fleet.restart_count("node") == 1


def test_a_crash_loop_backs_off_instead_of_spinning(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(processes_module, "STABLE_AFTER_S", 3600.0)
    fleet = FleetProcesses(tmp_path / "logs", dict(os.environ), respawn_delay_s=0.05)
    try:
        fleet.start("dies", [sys.executable, "-c", "raise SystemExit(3)"])
        assert fleet.wait_restarted("dies", 3, timeout_s=30)
    finally:
        fleet.stop_all()
    delays = [restart.delay_s for restart in fleet.restarts[:3]]
    assert delays == [0.05, 0.1, 0.2]
    assert {restart.exit_code for restart in fleet.restarts} == {3}


def test_a_child_that_stayed_up_is_restarted_promptly_again(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A kill -9 of a node that got through its start-up is not a crash loop: the chaos
    # run's kills of a host that had served 20-30 s each doubled the delay, up to 30 s.
    monkeypatch.setattr(processes_module, "STABLE_AFTER_S", 0.5)
    fleet = FleetProcesses(tmp_path / "logs", dict(os.environ), respawn_delay_s=0.05)
    try:
        fleet.start("node", [sys.executable, "-c", CHILD])
        for kill in (1, 2):
            wait_for(
                lambda kill=kill: (
                    fleet.log_tail("node").split().count("up") == kill
                    and time.monotonic() - fleet.children["node"].started_at > 0.5
                ),
                timeout_s=30,
                what="the child to be up past STABLE_AFTER_S",
            )
            fleet.crash("node")
            assert fleet.wait_restarted("node", kill, timeout_s=30)
    finally:
        fleet.stop_all()
    assert [restart.delay_s for restart in fleet.restarts] == [0.05, 0.05]


def test_a_start_up_error_is_not_restarted(tmp_path: Path) -> None:
    """Exit code 1 is a node's "cannot start, waiting will not help" (ros/node_main.py):
    restarting it would only loop on the same error."""
    given_up: list[str] = []
    fleet = FleetProcesses(
        tmp_path / "logs", dict(os.environ), respawn_delay_s=0.05, on_give_up=given_up.append
    )
    try:
        fleet.start(
            "bad", [sys.executable, "-c", "import sys; sys.exit('bad: cannot start: no store')"]
        )
        wait_for(lambda: given_up == ["bad"], timeout_s=30, what="the supervisor to give up")
        time.sleep(0.2)  # a restart, were one scheduled, would be due by now
        assert fleet.restart_count("bad") == 0 and fleet.given_up == ["bad"]
        assert "cannot start" in fleet.log_tail("bad")
    finally:
        fleet.stop_all()


def test_stopping_never_restarts(tmp_path: Path) -> None:
    fleet = FleetProcesses(tmp_path / "logs", dict(os.environ), respawn_delay_s=0.01)
    fleet.start("node", [sys.executable, "-c", CHILD])
    wait_for(lambda: "up" in fleet.log_tail("node"), timeout_s=30, what="the child to start")
    fleet.stop_all()
    assert not fleet.alive("node") and fleet.restarts == []


PARENT = textwrap.dedent(
    """
    import os, sys, threading
    from pathlib import Path
    from fleet_idempotency.bringup.processes import FleetProcesses
    fleet = FleetProcesses(Path(sys.argv[1]), dict(os.environ))
    fleet.start("node", [sys.executable, "-c", sys.argv[2]])
    print(fleet.children["node"].process.pid, flush=True)
    threading.Event().wait()
    """
)


def _orphan(tmp_path: Path, child_script: str) -> int:
    """Start ``child_script`` under a FleetProcesses parent, SIGKILL the parent once the
    child watches it, and return the child's pid."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "logs"), child_script],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        wait_for(
            lambda: "up" in (tmp_path / "logs" / "node.log").read_text(),
            timeout_s=30,
            what="the child to start watching its parent",
        )
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait(timeout=30)
    return child


def test_children_exit_when_their_parent_is_sigkilled(tmp_path: Path) -> None:
    child = _orphan(tmp_path, CHILD)
    wait_for(lambda: not _alive(child), timeout_s=30, what="the orphaned child to exit")


# A node whose shutdown hangs holding the GIL, as rclpy's destroy_node was seen to do (a
# C++ busy-wait): SIGTERM starts the shutdown as in run_nodes, which arms the deadline;
# then a regular expression that backtracks for ever in C stands for the stuck call. No
# Python thread of the child can run again, so only the kernel can end it.
STUCK_CHILD = textwrap.dedent(
    """
    import re, signal, threading
    from fleet_idempotency.ros import parent_watch
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    parent_watch.watch_parent()
    print("up", flush=True)
    stop.wait()
    parent_watch.arm_shutdown_deadline(1.0)
    re.match(r"(a+)+$", "a" * 64 + "b")
    """
)


def test_a_child_whose_shutdown_hangs_holding_the_gil_is_ended_by_its_deadline(
    tmp_path: Path,
) -> None:
    child = _orphan(tmp_path, STUCK_CHILD)
    wait_for(lambda: not _alive(child), timeout_s=30, what="the stuck child to be ended")
