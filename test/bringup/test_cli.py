"""`fleet-idem up`, then `submit` and `check` from another process, as a user would."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from fleet_idempotency.ros.dds_isolation import isolated_environment

from support.ros_support import describe_processes, processes_mentioning, wait_for

BIN = Path(sys.prefix) / "bin"


def run_client(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "fleet-idem"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def start_up(store: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """`fleet-idem up` in the background, as a user starts it, logging to ``log_path``."""
    with log_path.open("w") as log:
        return subprocess.Popen(
            [str(BIN / "fleet-idem"), "up", "--speed", "100", "--store-dir", str(store)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=log_path.parent,
        )


def client_env(log_path: Path) -> dict[str, str]:
    """The environment a second shell gets from the domain `fleet-idem up` printed."""
    line = wait_for(
        lambda: re.search(r"ROS_DOMAIN_ID=(\d+)", log_path.read_text()),
        timeout_s=60,
        what="fleet-idem up to print its domain",
    )
    return {
        **os.environ,
        "ROS_DOMAIN_ID": line.group(1),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
    }


def test_up_then_submit_twice_and_check(tmp_path: Path) -> None:
    store = tmp_path / "fleet"
    log_path = tmp_path / "up.log"
    up = start_up(store, log_path)
    try:
        env = client_env(log_path)
        submit = [
            "submit",
            "--client",
            "ops",
            "--key",
            "order-42",
            "--robot",
            "forklift_1",
            "--type",
            "pick",
            "--payload",
            '{"slot": "A1"}',
            "--wait",
            "60",
        ]
        first = run_client(submit, env, tmp_path)
        assert first.returncode == 0, first.stdout + first.stderr
        answer = json.loads(first.stdout)
        assert (answer["status_code"], answer["replayed"]) == (200, False)
        assert answer["result"]["item"] == "P-1"

        resubmitted = run_client(submit, env, tmp_path)
        assert resubmitted.returncode == 0, resubmitted.stdout + resubmitted.stderr
        again = json.loads(resubmitted.stdout)
        assert (again["status_code"], again["replayed"]) == (200, True)
        assert again["result"] == answer["result"]

        check = run_client(["check", "--client", "ops", "--key", "order-42"], env, tmp_path)
        assert check.returncode == 0, check.stdout + check.stderr
        status = json.loads(check.stdout)
        assert status["found"] and status["state"] == 3

        unknown = run_client(["check", "--client", "ops", "--key", "never"], env, tmp_path)
        assert unknown.returncode == 1, unknown.stdout + unknown.stderr
        assert json.loads(unknown.stdout)["found"] is False

        # The HTTP API started with the fleet; without API keys its caller is "local".
        # A ROS submit and an HTTP retry of the same intent agree (one fingerprint).
        url = re.search(r"HTTP API and fleet page: (\S+)", log_path.read_text())
        assert url is not None, log_path.read_text()
        dock = ["--robot", "amr_1", "--type", "dock", "--payload", '{"dock": "D2"}']
        ros = run_client(["submit", "--client", "local", "--key", "same", *dock], env, tmp_path)
        assert ros.returncode == 0, ros.stdout + ros.stderr
        http = httpx.post(
            f"{url.group(1)}v1/robots/amr_1/commands",
            json={"command_type": "dock", "payload": {"dock": "D2"}},
            headers={"Idempotency-Key": "same"},
            timeout=30,
        )
        assert http.status_code == 200 and http.headers["idempotent-replayed"] == "true"
        assert http.json()["result"] == json.loads(ros.stdout)["result"]
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)
    wait_for(
        lambda: not processes_mentioning(str(store)),
        timeout_s=10,
        what="no process of fleet-idem up to remain",
    )


def _pid_of(fragment: str, store: Path) -> int:
    (line,) = [p for p in processes_mentioning(str(store)) if fragment in p]
    return int(line.split(":", 1)[0])


def test_up_restarts_a_killed_node_and_sigkill_of_up_leaves_no_node(tmp_path: Path) -> None:
    store = tmp_path / "fleet"
    log_path = tmp_path / "up.log"
    up = start_up(store, log_path)
    try:
        env = client_env(log_path)
        victim = _pid_of("robot_id:=amr_1", store)
        os.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: "supervisor: agent_amr_1 exited (code -9); restarted" in log_path.read_text(),
            timeout_s=60,
            what="the supervisor to restart the killed agent",
        )
        assert _pid_of("robot_id:=amr_1", store) != victim
        dock = ["submit", "--robot", "amr_1", "--type", "dock", "--payload", '{"dock": "D1"}']
        answer = run_client([*dock, "--wait", "60"], env, tmp_path)
        assert answer.returncode == 0, answer.stdout + answer.stderr
        assert json.loads(answer.stdout)["status_code"] == 200
        assert processes_mentioning(str(store)), "the fleet should be running now"
    finally:
        up.kill()  # SIGKILL: no chance to stop its children itself
        up.wait(timeout=60)
    # Each node sees its parent pipe close and shuts down (stores closed cleanly). A node
    # the supervisor had just restarted first finishes starting (imports, discovery)
    # before it reads the EOF, then has parent_watch.GRACE_S to stop: on a loaded machine
    # that has taken longer than 30 s once.
    try:
        wait_for(
            lambda: not processes_mentioning(str(store)),
            timeout_s=90,
            what="every node of the SIGKILLed fleet-idem up to exit",
        )
    except pytest.fail.Exception:
        pytest.fail(f"still running 90 s after up's SIGKILL:\n{describe_processes(str(store))}")


def test_client_commands_fail_clearly_without_a_fleet(tmp_path: Path, ros_domain: int) -> None:
    env = isolated_environment(ros_domain)  # a domain no fleet uses: nobody answers
    command = ["submit", "--robot", "amr_1", "--type", "dock", "--payload", '{"dock": "D1"}']
    result = run_client([*command, "--wait", "1", "--timeout", "3"], env, tmp_path)
    assert result.returncode == 3, result.stderr
    assert "no answer" in result.stderr and f"ROS_DOMAIN_ID={ros_domain}" in result.stderr


def test_a_bad_fleet_file_is_a_clear_error(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("robots:\n  - {id: r1, type: submarine}\n")
    result = run_client(
        ["demo", "--fleet", str(fleet), "--commands", "1"], dict(os.environ), tmp_path
    )
    assert result.returncode == 2
    assert "robots.0: " in result.stderr and "'submarine'" in result.stderr
    assert "Traceback" not in result.stderr
