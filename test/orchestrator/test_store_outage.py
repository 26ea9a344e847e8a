"""The orchestrator's database goes away while a command is out: nothing is lost.

A robot's answer can arrive while the orchestrator cannot write its store (PostgreSQL
down or restarting, an LMDB store full). The answer must not be dropped on the floor: the
command stays in flight, and its re-send fetches the same answer from the robot's store
once the orchestrator's store takes writes again. Events the log could not take wait for
the next flush.

Real parts: an OrchestratorCore on a real PostgreSQL store and log (the session server,
stopped and started for real), a real AgentCore on a real LMDB store, the real world
model counting side effects.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.agent.core import AgentCore
from fleet_idempotency.bringup.postgres import LocalPostgres
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.events import (
    EventLogConfig,
    EventLogUnavailable,
    EventType,
    FleetEventRecord,
    open_event_log,
    replay,
)
from fleet_idempotency.orchestrator.core import OrchestratorCore, SubmitRequest, robot_key
from fleet_idempotency.orchestrator.journal import Journal
from fleet_idempotency.orchestrator.replica import open_shared_log, open_shared_store
from fleet_idempotency.protocol import Answer, Delivery
from fleet_idempotency.robots.simulated import SimulatedRobot
from fleet_idempotency.sim.world import World
from fleet_idempotency.sim.world_link import LocalWorldLink
from fleet_idempotency.store import IdempotencyStore, State, StoreConfig

from support.in_process import FAST_ORCHESTRATOR, QuietLogger
from support.paths import FLEET_FILE

FLEET = load_fleet(FLEET_FILE)
TIMEOUT_S = 30.0
ROBOT = "amr_1"


class OneRobot:
    """One orchestrator core and one robot, pumped by the test; answers are held until
    the test hands them over, so it decides when the orchestrator hears them."""

    def __init__(self, root: Path, url: str) -> None:
        self.world = World(FLEET.world)
        self.store = open_shared_store(url, pg_timeout_s=1.0)
        self.events = open_shared_log(url, durable=True)
        self.core = OrchestratorCore(
            fleet=FLEET, store=self.store, events=self.events, settings=FAST_ORCHESTRATOR
        )
        spec = next(spec for spec in FLEET.robots if spec.id == ROBOT)
        self.answers: list[Answer] = []
        self.agent = AgentCore(
            backend=SimulatedRobot(
                spec.id, spec.type, LocalWorldLink(self.world), spec.start, time_scale=0.0
            ),
            store=IdempotencyStore.open(StoreConfig(path=root / "agent")),
            capacity=spec.capacity,
            publish=self.answers.append,
            logger=QuietLogger(),
        )
        self.agent.start()
        self.sent: list[Delivery] = []

    def send_due(self) -> None:
        load = self.agent.load()
        self.core.on_status(ROBOT, load.queue_depth, load.capacity)
        for delivery in self.core.dispatch():
            self.sent.append(delivery)
            self.agent.submit(delivery)
        # As the dispatch loop does: the events wait for a later flush while the log is
        # still unreachable (a pool reconnects with a backoff after a restart).
        with contextlib.suppress(EventLogUnavailable):
            self.core.flush_events()

    def wait_for(self, condition: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + TIMEOUT_S
        while not (value := condition()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.send_due()
            time.sleep(0.005)
        return value

    def last_answer_for(self, key: str) -> Answer | None:
        """The robot's outcome for ``key``: a final result or a refusal."""
        wanted = robot_key("wms", key)
        settling = [
            a
            for a in self.answers
            if a.key == wanted and (a.state.is_final or a.state == State.REJECTED)
        ]
        return settling[-1] if settling else None

    def hand_over_answers(self) -> None:
        answers, self.answers[:] = list(self.answers), []
        for answer in answers:
            self.core.on_result(answer)

    def close(self) -> None:
        self.agent.stop()
        self.agent.store.close()
        self.store.close()
        self.events.close()


@pytest.fixture
def one_robot(tmp_path: Path, postgres_url: str) -> Iterator[OneRobot]:
    made = OneRobot(tmp_path, postgres_url)
    yield made
    made.close()


def submit(one: OneRobot, key: str, command: str, payload: dict[str, Any]) -> int:
    request = SubmitRequest("wms", key, ROBOT, command, json.dumps(payload))
    return one.core.submit(request).status_code


def test_a_result_that_arrives_while_the_store_is_down_is_stored_once_it_is_back(
    one_robot: OneRobot, postgres_server: LocalPostgres
) -> None:
    assert submit(one_robot, "outage", "dock", {"dock": "D2"}) == 202
    answer = one_robot.wait_for(lambda: one_robot.last_answer_for("outage"), "the robot")
    postgres_server.stop(mode="immediate")
    try:
        one_robot.hand_over_answers()
        assert one_robot.core.counters["finish_deferred"] == 1
        # Still ours to finish: in flight, and the status check says so.
        assert one_robot.core.pending() == 1
    finally:
        postgres_server.start_again()
    one_robot.wait_for(
        lambda: (
            (one_robot.hand_over_answers(), one_robot.store.check("wms", "outage"))[
                1
            ].state.is_final
        ),
        "the re-send's answer to be stored",
    )
    record = one_robot.store.check("wms", "outage")
    assert (record.state, record.result_json) == (State.COMPLETED, answer.result_json)
    resent = [d for d in one_robot.sent if d.key == robot_key("wms", "outage")]
    assert [d.attempt for d in resent] == [1, 2], "one re-send fetched the stored answer"
    assert one_robot.world.side_effect_count(ROBOT, robot_key("wms", "outage")) == 1
    assert one_robot.core.pending() == 0
    one_robot.core.flush_events()  # the log is back: raises if it is not
    view = replay(one_robot.events.read()).keys[("wms", "outage")]
    assert view.state == State.COMPLETED, "the log's RESULT was not crowded out"


def test_a_refusal_that_arrives_while_the_store_is_down_releases_the_key_once_it_is_back(
    one_robot: OneRobot, postgres_server: LocalPostgres
) -> None:
    assert submit(one_robot, "nowhere", "move_to_waypoint", {"waypoint": "W99"}) == 202
    one_robot.wait_for(lambda: one_robot.last_answer_for("nowhere"), "the robot's refusal")
    postgres_server.stop(mode="immediate")
    try:
        one_robot.hand_over_answers()
        assert one_robot.core.counters["release_deferred"] == 1
        assert one_robot.core.pending() == 1
    finally:
        postgres_server.start_again()
    one_robot.wait_for(
        lambda: (one_robot.hand_over_answers(), one_robot.store.check("wms", "nowhere"))[1] is None,
        "the key to be released",
    )
    answer = one_robot.core.final_answer("wms", "nowhere", 0.0)
    assert answer is not None and (answer.state, answer.status_code) == (State.REJECTED, 400)
    assert one_robot.world.side_effect_count(ROBOT, robot_key("wms", "nowhere")) == 0
    one_robot.core.flush_events()  # the log is back: raises if it is not
    kinds = [event.event_type for event in one_robot.events.events_for("wms", "nowhere")]
    assert kinds[0] == EventType.ACCEPTED and kinds[-1] == EventType.REJECTED


def test_events_the_log_could_not_take_are_appended_by_the_next_flush(
    postgres_url: str, postgres_server: LocalPostgres
) -> None:
    log = open_event_log(EventLogConfig(url=postgres_url, pg_connect_timeout_s=1.0))
    published: list[FleetEventRecord] = []
    journal = Journal(log, on_appended=published.extend)
    try:

        def fact(key: str) -> None:
            journal.append_fact(
                EventType.DUPLICATE_SUPPRESSED,
                client_id="wms",
                key=key,
                robot_id=ROBOT,
                detail={},
                discriminator="d",
            )

        fact("before")
        postgres_server.stop(mode="immediate")
        try:
            with pytest.raises(EventLogUnavailable):
                journal.flush()
        finally:
            postgres_server.start_again()
        fact("after")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                journal.flush()
                break
            except EventLogUnavailable:
                # The pool reconnects with a backoff after the restart.
                assert time.monotonic() < deadline, "the log never came back"
                time.sleep(0.05)
        assert [event.key for event in log.read()] == ["before", "after"], "kept, in order"
        assert [event.key for event in published] == ["before", "after"]
        journal.flush()
        assert log.last_sequence() == 2, "nothing appended twice"
    finally:
        log.close()
