"""After a crash, what the dead process had begun is never silently run again: by
policy it resumes (absolute moves) or is INTERRUPTED, and a backend that can ask its
robot (``reconciles_after_crash``) records what the robot says happened. And while a
backend is not ready, new commands are refused before any side effect, with the key
released, while commands already claimed wait for it. AgentCore with a real store and
real simulated robots in one process (the ROS shell is tested in test_agent_readiness)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from fleet_idempotency.agent.core import AgentCore
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.protocol import Answer, Delivery
from fleet_idempotency.robots.backend import (
    Command,
    ExecutionFailed,
    OutcomeUnknown,
    Readiness,
)
from fleet_idempotency.robots.simulated import SimulatedRobot
from fleet_idempotency.sim.world import World
from fleet_idempotency.sim.world_link import LocalWorldLink
from fleet_idempotency.store import IdempotencyStore, State, StoreConfig

from support.in_process import QuietLogger
from support.paths import FLEET_FILE

FLEET = load_fleet(FLEET_FILE)
TIMEOUT_S = 20.0


class AskableRobot(SimulatedRobot):
    """A simulated forklift whose controller remembers what it did, as a VDA 5050
    vehicle's state or an action server's goal status does, and that can be not ready."""

    reconciles_after_crash = True

    def __init__(self, world: World, knows: dict[str, Any]) -> None:
        spec = FLEET.robot("forklift_1")
        super().__init__("forklift_1", "forklift", LocalWorldLink(world), spec.start)
        self.knows = knows
        self.ready = threading.Event()
        self.ready.set()
        self.asked: list[str] = []
        self.executed: list[str] = []

    def readiness(self) -> Readiness:
        return Readiness(self.ready.is_set(), "" if self.ready.is_set() else "the controller")

    def execute(self, command: Command) -> dict[str, Any]:
        self.executed.append(command.key)
        return super().execute(command)

    def reconcile(self, command: Command) -> dict[str, Any]:
        self.asked.append(command.key)
        outcome = self.knows.get(command.key)
        if isinstance(outcome, threading.Event):  # still running on the robot
            outcome.wait(TIMEOUT_S)
            return {"finished": "after the restart"}
        if outcome == "done":
            return {"finished": "before the restart"}
        if outcome == "failed":
            raise ExecutionFailed("the vehicle reported the pick FAILED")
        raise OutcomeUnknown("the vehicle does not know this order")


class Answers:
    def __init__(self) -> None:
        self.items: list[Answer] = []
        self.changed = threading.Condition()

    def __call__(self, answer: Answer) -> None:
        with self.changed:
            self.items.append(answer)
            self.changed.notify_all()

    def final(self, key: str) -> Answer:
        def found() -> Answer | None:
            return next(
                (a for a in self.items if a.key == key and a.state.is_final and not a.replayed),
                None,
            )

        with self.changed:
            answer = self.changed.wait_for(found, TIMEOUT_S)
        assert answer is not None, f"no final answer for {key!r}: {self.items}"
        return answer


def claimed_by_a_dead_process(config: StoreConfig, keys: list[str]) -> None:
    with IdempotencyStore.open(config, owner="dead-boot/1/1") as previous:
        for key in keys:
            previous.claim(
                scope="forklift_1",
                key=key,
                robot_id="forklift_1",
                command_type="pick",
                payload_json=json.dumps({"slot": "A3"}),
            )


def start(robot: AskableRobot, config: StoreConfig, answers: Answers) -> AgentCore:
    core = AgentCore(
        backend=robot,
        store=IdempotencyStore.open(config),
        capacity=4,
        publish=answers,
        logger=QuietLogger(),
    )
    core.start()
    return core


def test_a_reconciling_backend_records_what_the_robot_says(tmp_path: Path) -> None:
    world = World(FLEET.world)
    still_running = threading.Event()
    robot = AskableRobot(
        world, {"k-done": "done", "k-failed": "failed", "k-running": still_running}
    )
    config = StoreConfig(path=tmp_path / "forklift_1", default_recovery_policy="reconcile")
    claimed_by_a_dead_process(config, ["k-done", "k-failed", "k-gone", "k-running"])
    answers = Answers()
    core = start(robot, config, answers)
    try:
        assert {r.key for r in core.store.last_recovery.reconciling} == {
            "k-done",
            "k-failed",
            "k-gone",
            "k-running",
        }
        assert answers.final("k-done").state == State.COMPLETED
        assert json.loads(answers.final("k-done").result_json) == {"finished": "before the restart"}
        failed = answers.final("k-failed")
        assert failed.state == State.FAILED and "FAILED" in failed.result_json
        gone = answers.final("k-gone")
        assert (gone.state, gone.status_code) == (State.INTERRUPTED, 500)
        # Still running on the robot: the agent waits for it, as for any command.
        assert core.check_key("k-running").state == State.IN_PROGRESS
        still_running.set()
        assert answers.final("k-running").state == State.COMPLETED
        assert robot.executed == []  # asked, never run again
        assert world.side_effect_count("forklift_1", "k-gone") == 0
        retry = core.submit(
            Delivery(
                key="k-gone",
                client_id="wms",
                robot_id="forklift_1",
                command_type="pick",
                payload_json=json.dumps({"slot": "A3"}),
                attempt=2,
            )
        )
        assert retry is not None and retry.replayed and retry.state == State.INTERRUPTED
        assert robot.executed == []
    finally:
        core.stop()
        core.store.close()


def test_a_backend_that_is_not_ready_refuses_new_keys_and_holds_resumed_ones(
    tmp_path: Path,
) -> None:
    world = World(FLEET.world)
    robot = AskableRobot(world, {})
    robot.ready.clear()
    config = StoreConfig(path=tmp_path / "forklift_1", default_recovery_policy="resume")
    claimed_by_a_dead_process(config, ["k-resumed"])
    answers = Answers()
    core = start(robot, config, answers)
    try:
        refused = core.submit(
            Delivery(
                key="k-new",
                client_id="wms",
                robot_id="forklift_1",
                command_type="dock",
                payload_json=json.dumps({"dock": "D1"}),
            )
        )
        assert refused is not None and (refused.state, refused.status_code) == (
            State.REJECTED,
            503,
        )
        assert "waiting for the controller" in refused.message
        assert not core.check_key("k-new").found  # nothing stored
        # Claimed before the crash: it may not be released; it waits for the robot.
        assert core.check_key("k-resumed").state == State.IN_PROGRESS
        assert robot.executed == []
        robot.ready.set()
        assert answers.final("k-resumed").state == State.COMPLETED
        assert robot.executed == ["k-resumed"]
    finally:
        core.stop()
        core.store.close()
