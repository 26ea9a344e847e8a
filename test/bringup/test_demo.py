"""End-to-end proof: the demo's reduced chaos run keeps every invariant, and Ctrl-C
leaves no process behind. Real processes, real DDS, real kill -9s."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.ros_support import processes_mentioning, wait_for

FLEET_IDEM = str(Path(sys.prefix) / "bin" / "fleet-idem")


def run_demo(store: Path, *options: str) -> str:
    """Run `fleet-idem demo` to the end; return its output after checking it passed."""
    run = subprocess.run(
        [FLEET_IDEM, "demo", *options, "--store-dir", str(store)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=store.parent,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-5000:]
    assert "result: PASS" in output and "[FAIL]" not in output
    assert not processes_mentioning(str(store)), "the demo left processes behind"
    return output


@pytest.mark.slow
def test_reduced_chaos_run_keeps_every_invariant(tmp_path: Path) -> None:
    output = run_demo(
        tmp_path / "demo",
        "--commands",
        "160",
        "--speed",
        "50",
        "--seed",
        "3",
        "--drop-results",
        "0.25",
        "--duplicate-deliveries",
        "0.2",
        "--reordered-deliveries",
        "0.2",
        "--client-retries",
        "0.2",
        "--robot-crashes",
        "2",
        "--orchestrator-crashes",
        "1",
    )
    # Two agents, the orchestrator and one simulated VDA 5050 vehicle; and the broker.
    assert output.count("!! kill -9") == 4, output
    assert "!! kill -9 vehicle_" in output and "!! broker restart" in output
    assert "160 planned" in output
    # The default demo fleet is mixed: two robots are VDA 5050 vehicles behind a
    # password-protected Mosquitto, and some of their order publishes were lost.
    assert "for VDA 5050 robots forklift_2, amr_3" in output
    lost = re.search(r"order publishes lost (\d+), vehicle crashes 1, broker restarts 1", output)
    assert lost is not None and int(lost.group(1)) > 0, output
    for vehicle in ("vehicle_forklift_2", "vehicle_amr_3"):
        log = (tmp_path / "demo" / "logs" / f"{vehicle}.log").read_text()
        assert "stopped:" in log.splitlines()[-1], log[-2000:]  # an orderly stop at the end
    assert "lost results were recovered by re-sends" in output
    # Some clients submit over the HTTP API, with the same key scope as the ROS clients.
    http_calls = re.search(r"HTTP clients +amr_3, arm_1: (\d+) calls", output)
    assert http_calls is not None and int(http_calls.group(1)) > 0, output
    # Some over the ExecuteCommand action, with the same key scope again.
    goals = re.search(r"action clients +forklift_1, forklift_2: (\d+) ExecuteCommand goals", output)
    assert goals is not None and int(goals.group(1)) > 0, output


@pytest.mark.slow
def test_two_replicas_on_postgresql_survive_a_kill_of_the_lease_holder(tmp_path: Path) -> None:
    output = run_demo(
        tmp_path / "demo",
        "--replicas",
        "2",
        "--commands",
        "120",
        "--speed",
        "50",
        "--seed",
        "5",
        "--robot-crashes",
        "1",
        "--orchestrator-crashes",
        "1",
        "--no-http",
    )
    assert "2 replicas sharing postgresql://" in output
    killed = re.findall(r"!! kill -9 (orchestrator\S*)", output)
    assert len(killed) == 1, output
    assert f"supervisor restarted {killed[0]}" in output
    assert "event log replay equals the orchestrator's store: equal" in output


@pytest.mark.slow
def test_agents_hosted_in_one_process_survive_a_crash_of_that_process(tmp_path: Path) -> None:
    store = tmp_path / "hosted"
    output = run_demo(
        store,
        "--host-agents",
        "--commands",
        "80",
        "--speed",
        "50",
        "--robot-crashes",
        "1",
        "--orchestrator-crashes",
        "0",
    )
    assert "!! kill -9 agents" in output
    # One process, but one store per robot.
    assert len(list((store / "robots").glob("*/data.mdb"))) == 6


@pytest.mark.slow
def test_ctrl_c_stops_every_process_the_demo_started(tmp_path: Path) -> None:
    store = tmp_path / "interrupted"
    log = (tmp_path / "demo.log").open("w")
    demo = subprocess.Popen(
        [FLEET_IDEM, "demo", "--commands", "5000", "--speed", "20", "--store-dir", str(store)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        wait_for(
            lambda: "final |" in (tmp_path / "demo.log").read_text(),
            timeout_s=120,
            what="the mission to be under way",
        )
        assert processes_mentioning(str(store)), "the fleet should be running now"
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 130
    finally:
        if demo.poll() is None:
            demo.kill()
        log.close()
    # The demo waits for its children before exiting; allow the kernel a moment to reap.
    wait_for(
        lambda: not processes_mentioning(str(store)),
        timeout_s=10,
        what="no process of the interrupted demo to remain",
    )
    assert "interrupted" in (tmp_path / "demo.log").read_text()
