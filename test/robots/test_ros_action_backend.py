"""The ``ros_action`` backend against a real rclpy action server in a separate process
(test/support/action_server.py, the package's own ExecuteCommand type standing in for a
robot's action): one goal per key, recovery by the goal UUID derived from the key, never
a goal sent twice. The server's fsync'd goal log is the oracle. The backend also passes
the conformance kit, as a backend that reconciles after a crash."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.bringup.processes import clean_dds_shared_memory
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.ros_action import goal_uuid
from fleet_idempotency.testing import BackendUnderTest, CommandSpec
from fleet_idempotency.testing.agent_under_test import AgentUnderTest
from fleet_idempotency.testing.conformance import *  # noqa: F403 - the conformance checks

from support.paths import FLEET_FILE, SUPPORT
from support.ros_support import ChildProcesses

ROBOT = "robot_under_test"
ACTION = "/robot_under_test/drive"
DOCK_ACTION = "/robot_under_test/dock"
# Seconds per metre the server "drives": 40 m is 4 s, long enough to catch it running.
SECONDS_PER_METRE = 0.1
COMPLETED, FAILED, INTERRUPTED, REJECTED = 3, 4, 5, 6


def mapping(name: str) -> dict[str, Any]:
    return {
        "action_name": name,
        "action_type": "fleet_idempotency/action/ExecuteCommand",
        "goal": {
            "idempotency_key": "$key",
            "robot_id": "$robot_id",
            "command_type": "$command_type",
            "payload_json": "$payload_json",
            "client_id": "fleet",
        },
        "outcomes": {
            "error_code_field": "status_code",
            "ok_codes": [200],
            "refused_codes": [404],
            "error_message_field": "message",
            "error_codes": {"404": "no such place", "500": "motor fault"},
        },
        "result_fields": ["result_json"],
    }


PARAMS = {
    "actions": {"move_to_waypoint": mapping(ACTION), "dock": mapping(DOCK_ACTION)},
    "fleet_file": str(FLEET_FILE),
    "accept_timeout_s": 5.0,
    "result_poll_s": 1.0,
}


class ActionServerProcess:
    """The robot's action server: start, kill -9, restart; its goal log."""

    def __init__(
        self, children: ChildProcesses, env: dict[str, str], log: Path, name: str = ACTION
    ) -> None:
        self.children, self.env, self.log, self.name = children, env, log, name
        self.lives = 0

    @property
    def process_name(self) -> str:
        """One name per server and life: ChildProcesses stops every process it knows."""
        return f"action_server{self.name.replace('/', '_')}_{self.lives}"

    def start(self) -> None:
        self.lives += 1
        self.children.spawn_python(
            self.process_name,
            [
                str(SUPPORT / "action_server.py"),
                "--name",
                self.name,
                "--log",
                str(self.log),
                "--seconds-per-metre",
                str(SECONDS_PER_METRE),
            ],
            self.env,
        )

    def kill(self) -> None:
        self.children.kill(self.process_name, signal.SIGKILL)

    def events(self, key: str, event: str = "goal") -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [line for line in lines if line["key"] == key and line["event"] == event]

    def goals(self, key: str) -> int:
        return len(self.events(key))


@pytest.fixture
def children(tmp_path: Path) -> Iterator[ChildProcesses]:
    children = ChildProcesses(tmp_path)
    try:
        yield children
    finally:
        children.stop_all()
        for name in children.processes:
            print(f"----- {name} -----\n{children.log(name)[-3000:]}")


@pytest.fixture
def server(
    conformance_env: dict[str, str], tmp_path: Path, children: ChildProcesses
) -> ActionServerProcess:
    return ActionServerProcess(children, conformance_env, tmp_path / "goals.jsonl")


@pytest.fixture
def dock_server(
    conformance_env: dict[str, str], tmp_path: Path, children: ChildProcesses
) -> ActionServerProcess:
    return ActionServerProcess(children, conformance_env, tmp_path / "goals.jsonl", DOCK_ACTION)


@pytest.fixture
def backend_under_test(server: ActionServerProcess) -> BackendUnderTest:
    server.start()
    return BackendUnderTest(
        backend="ros_action",
        robot_type="amr",
        params=PARAMS,
        completes=CommandSpec("move_to_waypoint", {"x": 1.0, "y": 0.5}),
        refused=CommandSpec("move_to_waypoint", {"waypoint": "NOWHERE"}),
        slow=CommandSpec("move_to_waypoint", {"x": 40.0, "y": 0.5}),
        side_effects=server.goals,
        robot_id=ROBOT,
        start=Pose(x=0.0, y=0.5),
        reconciles_after_crash=True,
    )


def robot_key(key: str) -> str:
    """The key the agent holds: the kit sends its keys to the robot as they are."""
    return key


def wait_for_goal(agent: AgentUnderTest, server: ActionServerProcess, key: str) -> None:
    agent.wait(lambda: server.goals(robot_key(key)) == 1, f"the server to receive {key!r}")


def test_servers_not_up_are_refused_with_503_and_nothing_stored_then_run_once(
    conformance_env: dict[str, str],
    conformance_context: Any,
    tmp_path: Path,
    server: ActionServerProcess,
    dock_server: ActionServerProcess,
) -> None:
    move = CommandSpec("move_to_waypoint", {"waypoint": "W3"})
    dock = CommandSpec("dock", {"dock": "D1"})
    subject = BackendUnderTest(
        backend="ros_action",
        robot_type="amr",
        params=PARAMS,
        completes=move,
        refused=CommandSpec("move_to_waypoint", {"waypoint": "NOWHERE"}),
        slow=CommandSpec("move_to_waypoint", {"x": 40.0, "y": 0.5}),
        side_effects=server.goals,
        robot_id=ROBOT,
    )
    agent = AgentUnderTest(
        subject, env=conformance_env, work_dir=tmp_path, context=conformance_context
    )
    try:
        # No action server at all: the robot's stack is not up. The agent says so and
        # refuses new commands before storing anything.
        agent.start(wait_ready=False)
        status = agent.latest_status()
        assert not status.ready and ACTION in status.waiting_for, status
        agent.send("k-early", move)
        early = agent.answer("k-early", lambda r: r.state == REJECTED, "the refusal")
        assert early.status_code == 503, early
        assert not agent.check_key("k-early").found
        server.start()
        agent.wait(lambda: agent.latest_status().ready, "the agent to see its server")

        # One server up, the dock's not: prepare refuses the dock with 503, nothing stored.
        agent.send("k-dock", dock)
        refusal = agent.answer("k-dock", lambda r: r.state == REJECTED, "the dock's refusal")
        assert refusal.status_code == 503 and DOCK_ACTION in refusal.message, refusal
        assert not agent.check_key("k-dock").found, "a refusal before any goal stores nothing"
        assert dock_server.goals("k-dock") == 0
        dock_server.start()
        resender = Resender(agent, "k-dock", dock)
        agent.wait(
            lambda: resender.final_state() == COMPLETED,
            "the same key to run once the dock's server is up",
            timeout_s=60.0,
        )
        (goal,) = dock_server.events("k-dock")  # one goal, whatever was re-sent
        assert goal["goal_id"] == str(goal_uuid(ROBOT, "k-dock"))
        body = json.loads(agent.final("k-dock").result_json)
        assert body["goal_id"] == goal["goal_id"] and body["status"] == "succeeded"
        assert body["action"] == DOCK_ACTION

        # The waypoint resolved from the fleet file; the goal built from the payload.
        agent.send("k-early", move, attempt=2)
        final = agent.final("k-early")
        assert final.state == COMPLETED, final
        arrived = json.loads(json.loads(final.result_json)["result"]["result_json"])["arrived"]
        assert arrived == {"waypoint": "W3"}
        assert server.goals("k-early") == 1

        # Outcome mapping: a fault after moving is FAILED 500, a refusal by the server
        # FAILED 400 (the goal was sent: the key is spent), each with its message.
        agent.send("k-fault", CommandSpec("dock", {"dock": "D8"}))
        fault = agent.final("k-fault")
        assert (fault.state, fault.status_code) == (FAILED, 500), fault
        assert "motor fault" in fault.result_json
        agent.send("k-refused", CommandSpec("dock", {"dock": "D9"}))
        refused = agent.final("k-refused")
        assert (refused.state, refused.status_code) == (FAILED, 400), refused
        assert "refused" in refused.result_json and "no such place" in refused.result_json
        # Re-sent: answered from the store, no second goal.
        agent.send("k-refused", CommandSpec("dock", {"dock": "D9"}), attempt=2)
        replay = agent.answer("k-refused", lambda r: r.attempt == 2, "the replay")
        assert replay.replayed and replay.state == FAILED
        agent.spin_for(0.5)
        assert dock_server.goals("k-refused") == 1
    finally:
        agent.close()
        print(f"----- agent -----\n{agent.log()[-4000:]}")


class Resender:
    """Re-sends one command every second until it is final, as the orchestrator would
    after a 503 (the robot's refusal released the key: a re-send is a new claim)."""

    def __init__(self, agent: AgentUnderTest, key: str, command: CommandSpec) -> None:
        self.agent, self.key, self.command = agent, key, command
        self.attempt, self.sent_at = 1, 0.0

    def final_state(self) -> int:
        finals = [r for r in self.agent.answers(self.key) if r.state in (3, 4, 5)]
        if finals:
            return int(finals[0].state)
        if time.monotonic() - self.sent_at > 1.0:
            self.attempt += 1
            self.agent.send(self.key, self.command, attempt=self.attempt)
            self.sent_at = time.monotonic()
        return 0


def test_agent_kill_9_after_send_goal_is_recovered_by_uuid_without_a_second_goal(
    agent_under_test: AgentUnderTest,
    backend_under_test: BackendUnderTest,
    server: ActionServerProcess,
) -> None:
    agent, key = agent_under_test, "k-crash"
    agent.send(key, backend_under_test.slow)
    wait_for_goal(agent, server, key)
    assert agent.signal(signal.SIGKILL) == -signal.SIGKILL
    clean_dds_shared_memory()
    # The goal finishes on the robot while its agent is down.
    agent.wait(lambda: server.events(robot_key(key), "done"), "the goal to finish", 30.0)
    agent.start()
    final = agent.final_after_restart(key)
    assert final.state == COMPLETED and final.status_code == 200, final
    body = json.loads(final.result_json)
    assert body["goal_id"] == str(goal_uuid(ROBOT, robot_key(key)))
    assert "1 to reconcile" in agent.log()
    agent.spin_for(0.5)
    assert server.goals(robot_key(key)) == 1, "recovered by UUID, never sent again"


def test_server_restart_forgets_the_goal_interrupted_and_never_resent(
    agent_under_test: AgentUnderTest,
    backend_under_test: BackendUnderTest,
    server: ActionServerProcess,
) -> None:
    agent, key = agent_under_test, "k-forgotten"
    agent.send(key, backend_under_test.slow)
    wait_for_goal(agent, server, key)
    server.kill()
    server.start()  # a new process: it knows no goal of its predecessor
    final = agent.final(key, timeout_s=60.0)
    assert final.state == INTERRUPTED and final.status_code == 500, final
    assert "does not know goal" in final.result_json
    agent.send(key, backend_under_test.slow, attempt=2)
    replay = agent.answer(key, lambda r: r.attempt == 2, "the answer to the retry")
    assert replay.replayed and replay.state == INTERRUPTED
    agent.spin_for(1.0)
    assert server.goals(robot_key(key)) == 1, "an INTERRUPTED goal is never sent again"
