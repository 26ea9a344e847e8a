"""A child killed by a signal keeps its UDP ports from its replacement for a while.

Real processes, real sockets and real signals. The children pick their port as a Fast DDS
participant picks its id: the first of a run of ports that is free. Whether DDS then
matches the replacement sooner is measured, not tested (``bench/bench_discovery.py``,
``bench/bench_restart.py``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from fleet_idempotency.bringup.port_hold import PortHold, is_dds_multicast_port, udp_ports
from fleet_idempotency.bringup.processes import FleetProcesses

from support.ros_support import wait_for

# Binds the first free port from argv[1] on, says which, and runs until SIGTERM. With
# argv[2], a marker file: the first run exits with code 3 right after binding.
CHILD_ON_PORT = textwrap.dedent(
    """
    import os, signal, socket, sys, threading
    from fleet_idempotency.ros.parent_watch import watch_parent
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    watch_parent()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    port = int(sys.argv[1])
    while True:
        try:
            sock.bind(("0.0.0.0", port))
            break
        except OSError:
            port += 1
    print(f"port {port}", flush=True)
    if len(sys.argv) > 2 and not os.path.exists(sys.argv[2]):
        open(sys.argv[2], "w").close()
        sys.exit(3)
    stop.wait()
    sys.exit(0)
    """
)


def _free_port_pair() -> int:
    """A port that is free, with the next one free too; never a port the hold leaves alone
    on purpose (a DDS multicast port: 2 in 250 of the ports the OS hands out are one)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("0.0.0.0", 0))
            port = probe.getsockname()[1]
        if not is_dds_multicast_port(port) and _bindable(port) and _bindable(port + 1):
            return port
    raise AssertionError("no two free neighbouring UDP ports")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def _ports_said(fleet: FleetProcesses) -> list[int]:
    return [int(line.split()[1]) for line in fleet.log_tail("node").splitlines() if "port" in line]


def test_udp_ports_names_the_sockets_a_live_process_holds() -> None:
    port = _free_port_pair()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_ON_PORT, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split() == ["port", str(port)]
        assert port in udp_ports(child.pid)
    finally:
        child.kill()
        child.wait()
    assert udp_ports(child.pid) == set(), "a reaped process holds nothing"


def test_a_port_hold_binds_what_is_free_and_lets_go_when_released() -> None:
    port = _free_port_pair()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("0.0.0.0", port + 1))  # someone else got this one meanwhile
        hold = PortHold({port, port + 1}, hold_s=60.0)
        try:
            assert hold.ports == {port}, "a port taken again is left to its new owner"
            assert not _bindable(port)
        finally:
            hold.release()
    assert _bindable(port)
    assert hold.ports == set()


def test_a_port_hold_leaves_dds_multicast_ports_alone() -> None:
    """Every participant of a domain binds its two multicast ports with SO_REUSEADDR; a
    hold without it would keep the replacement out of discovery."""
    domain_200 = 7400 + 250 * 200
    hold = PortHold({domain_200, domain_200 + 1}, hold_s=60.0)
    try:
        assert hold.ports == set()
        assert _bindable(domain_200) and _bindable(domain_200 + 1)
    finally:
        hold.release()


def test_a_port_hold_ends_by_itself() -> None:
    port = _free_port_pair()
    hold = PortHold({port}, hold_s=0.2)
    assert not _bindable(port)
    wait_for(lambda: _bindable(port), timeout_s=30, what="the hold to end")
    assert hold.ports == set()


def test_the_replacement_of_a_crashed_child_does_not_get_its_port(tmp_path: Path) -> None:
    port = _free_port_pair()
    fleet = FleetProcesses(tmp_path / "logs", dict(os.environ), respawn_delay_s=0.05)
    try:
        fleet.start("node", [sys.executable, "-c", CHILD_ON_PORT, str(port)])
        wait_for(lambda: _ports_said(fleet) == [port], timeout_s=30, what="the child's port")
        fleet.crash("node")  # kill -9
        assert fleet.wait_restarted("node", 1, timeout_s=30)
        wait_for(lambda: len(_ports_said(fleet)) == 2, timeout_s=30, what="the replacement")
        assert _ports_said(fleet) == [port, port + 1]
    finally:
        fleet.stop_all()
    assert _bindable(port), "stopping the fleet ends every hold"


def test_a_child_killed_from_outside_is_held_too(tmp_path: Path) -> None:
    """Not through ``crash``: the supervisor learned the ports while the child ran."""
    port = _free_port_pair()
    fleet = FleetProcesses(tmp_path / "logs", dict(os.environ), respawn_delay_s=0.05)
    try:
        fleet.start("node", [sys.executable, "-c", CHILD_ON_PORT, str(port)])
        wait_for(
            lambda: port in fleet.children["node"].udp_ports,
            timeout_s=30,
            what="the supervisor to learn the child's port",
        )
        os.killpg(fleet.children["node"].process.pid, signal.SIGKILL)
        assert fleet.wait_restarted("node", 1, timeout_s=30)
        wait_for(lambda: len(_ports_said(fleet)) == 2, timeout_s=30, what="the replacement")
        assert _ports_said(fleet) == [port, port + 1]
    finally:
        fleet.stop_all()


def test_a_child_that_exits_by_itself_leaves_its_port_to_its_replacement(
    tmp_path: Path,
) -> None:
    """An exit code, not a signal: the process closed what it had (a ROS node says
    goodbye on its way out), so there is nothing to keep from the next one."""
    port = _free_port_pair()
    marker = tmp_path / "exited-once"
    fleet = FleetProcesses(tmp_path / "logs", dict(os.environ), respawn_delay_s=0.05)
    try:
        fleet.start("node", [sys.executable, "-c", CHILD_ON_PORT, str(port), str(marker)])
        assert fleet.wait_restarted("node", 1, timeout_s=30)
        wait_for(lambda: len(_ports_said(fleet)) == 2, timeout_s=30, what="the replacement")
        assert _ports_said(fleet) == [port, port]
        assert fleet.restarts[0].exit_code == 3
    finally:
        fleet.stop_all()


def test_no_hold_when_disabled(tmp_path: Path) -> None:
    port = _free_port_pair()
    fleet = FleetProcesses(
        tmp_path / "logs", dict(os.environ), respawn_delay_s=0.05, port_hold_s=0.0
    )
    try:
        fleet.start("node", [sys.executable, "-c", CHILD_ON_PORT, str(port)])
        wait_for(lambda: _ports_said(fleet) == [port], timeout_s=30, what="the child's port")
        fleet.crash("node")
        assert fleet.wait_restarted("node", 1, timeout_s=30)
        wait_for(lambda: len(_ports_said(fleet)) == 2, timeout_s=30, what="the replacement")
        assert _ports_said(fleet) == [port, port]
    finally:
        fleet.stop_all()
