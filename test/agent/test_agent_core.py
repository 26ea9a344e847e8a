"""The agent's logic with a real LMDB store, the real world model and a simulated robot.

No ROS here: these pin the semantics in-process and fast. The same behaviour through
real nodes in real processes is in test_agent_node.py.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.agent.core import AgentCore
from fleet_idempotency.agent.dedup_window import RecentDeliveries
from fleet_idempotency.agent.delayed_acks import DelayedAcks
from fleet_idempotency.auth import CommandSigner, CommandVerifier, FleetKeyring
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.protocol import Answer, Delivery
from fleet_idempotency.robots.simulated import SimulatedRobot
from fleet_idempotency.sim.world import World
from fleet_idempotency.sim.world_link import LocalWorldLink
from fleet_idempotency.store import IdempotencyStore, Record, State, StoreConfig, Tombstone

from support.in_process import QuietLogger
from support.paths import FLEET_FILE

FLEET = load_fleet(FLEET_FILE)
TIMEOUT_S = 20.0


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Agent:
    """One AgentCore wired to a real store and robot, recording what it publishes."""

    def __init__(
        self,
        world: World,
        store_root: Path,
        robot_id: str,
        *,
        capacity: int = 4,
        time_scale: float = 0.0,
        clock: Callable[[], float] | None = None,
        dedup_window: RecentDeliveries | None = None,
        verifier: CommandVerifier | None = None,
        delayed_acks: DelayedAcks | None = None,
        **store_settings: Any,
    ) -> None:
        spec = FLEET.robot(robot_id)
        self.world = world
        self.robot = SimulatedRobot(
            robot_id, spec.type, LocalWorldLink(world), spec.start, time_scale=time_scale
        )
        config = StoreConfig(path=store_root / robot_id, **store_settings)
        self.store = IdempotencyStore.open(config, **({"clock": clock} if clock else {}))
        self.answers: list[Answer] = []
        self._changed = threading.Condition()
        self.load_changes = 0
        self.core = AgentCore(
            backend=self.robot,
            store=self.store,
            capacity=capacity,
            publish=self._record,
            logger=QuietLogger(),
            on_load_change=self._count_load_change,
            dedup_window=dedup_window,
            verifier=verifier,
            delayed_acks=delayed_acks,
        )
        self.core.start()

    def _record(self, answer: Answer) -> None:
        with self._changed:
            self.answers.append(answer)
            self._changed.notify_all()

    def _count_load_change(self) -> None:
        with self._changed:
            self.load_changes += 1
            self._changed.notify_all()

    def send(
        self,
        key: str,
        command_type: str,
        payload: dict[str, Any] | str,
        attempt: int = 1,
        robot_id: str | None = None,
    ) -> Answer | None:
        payload_json = payload if isinstance(payload, str) else json.dumps(payload)
        return self.core.submit(
            Delivery(
                key=key,
                client_id="wms",
                robot_id=robot_id or self.core.robot_id,
                command_type=command_type,
                payload_json=payload_json,
                attempt=attempt,
            )
        )

    def final_answer(self, key: str) -> Answer:
        """The worker's answer for ``key``: its result, or its refusal before execution."""

        def outcome() -> Answer | None:
            return next((a for a in self.answers if a.key == key and _is_outcome(a)), None)

        with self._changed:
            found = self._changed.wait_for(outcome, TIMEOUT_S)
        assert found, f"no final answer for {key!r}; got {self.answers}"
        return found

    def wait(self, condition: Callable[[], bool], what: str) -> None:
        with self._changed:
            assert self._changed.wait_for(condition, TIMEOUT_S), f"timed out: {what}"

    def close(self) -> None:
        self.core.stop()
        self.store.close()


def _is_outcome(answer: Answer) -> bool:
    immediate = {409, 410, 422, 429}  # answered at delivery, never by the worker
    return (
        not answer.replayed
        and answer.state not in (State.ACCEPTED, State.IN_PROGRESS)
        and answer.status_code not in immediate
    )


@pytest.fixture
def world() -> World:
    return World(FLEET.world)


@pytest.fixture
def make_agent(world: World, tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    agents: list[Agent] = []

    def make(robot_id: str = "forklift_1", **options: Any) -> Agent:
        agent = Agent(world, tmp_path, robot_id, **options)
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()


def busy_with(agent: Agent, key: str) -> Callable[[], bool]:
    return lambda: agent.core.load().current_key == key


def test_five_deliveries_before_during_and_after_execution_run_once(
    make_agent: Callable[..., Agent], world: World
) -> None:
    agent = make_agent(time_scale=0.1)
    first = agent.send("k-pick", "pick", {"slot": "A1"}, attempt=1)
    assert first is not None and (first.state, first.status_code) == (State.ACCEPTED, 202)
    queued_retry = agent.send("k-pick", "pick", {"slot": "A1"}, attempt=2)
    assert queued_retry is not None and queued_retry.status_code == 409

    agent.wait(busy_with(agent, "k-pick"), "the pick to start")
    during = agent.send("k-pick", "pick", {"slot": "A1"}, attempt=3)
    assert during is not None
    assert (during.state, during.status_code, during.replayed) == (State.IN_PROGRESS, 409, False)

    final = agent.final_answer("k-pick")
    assert (final.state, final.status_code) == (State.COMPLETED, 200)
    for attempt in (4, 5):
        replay = agent.send("k-pick", "pick", {"slot": "A1"}, attempt=attempt)
        assert replay is not None
        assert replay.replayed is True
        assert (replay.state, replay.status_code, replay.result_json) == (
            State.COMPLETED,
            200,
            final.result_json,
        )
        assert replay.attempt == attempt
    assert world.side_effect_count("forklift_1", "k-pick") == 1
    assert json.loads(final.result_json)["item"] == "P-1"


def test_payload_key_order_is_not_a_mismatch(make_agent: Callable[..., Agent]) -> None:
    agent = make_agent()
    agent.send("k-move", "move_to_waypoint", '{"x": 3.0, "y": 4.0}')
    agent.final_answer("k-move")
    again = agent.send("k-move", "move_to_waypoint", '{"y": 4.0, "x": 3.0}', attempt=2)
    assert again is not None and again.replayed and again.status_code == 200


def test_same_key_different_payload_is_rejected_and_changes_nothing(
    make_agent: Callable[..., Agent], world: World
) -> None:
    agent = make_agent()
    agent.send("k-1", "pick", {"slot": "A1"})
    agent.final_answer("k-1")
    stored = agent.store.check("forklift_1", "k-1")

    answer = agent.send("k-1", "pick", {"slot": "A2"}, attempt=2)
    assert answer is not None
    assert (answer.state, answer.status_code) == (State.REJECTED, 422)
    assert isinstance(stored, Record)
    assert stored.fingerprint in answer.message
    assert answer.payload_sha256 in answer.message and answer.payload_sha256 != stored.fingerprint
    assert agent.store.check("forklift_1", "k-1") == stored
    assert world.side_effect_count("forklift_1", "k-1") == 1
    assert world.snapshot()["slots"]["A2"] == "P-2"


def test_refusal_before_any_side_effect_releases_the_key(
    make_agent: Callable[..., Agent], world: World
) -> None:
    agent = make_agent()
    # S1 is an arm station: a forklift refuses it before moving at all.
    agent.send("k-wrong", "pick", {"slot": "S1"})
    refusal = agent.final_answer("k-wrong")
    assert (refusal.state, refusal.status_code) == (State.REJECTED, 400)
    assert "station" in refusal.message
    assert agent.store.check("forklift_1", "k-wrong") is None
    # Released, not cached: the retry is evaluated again rather than replayed.
    agent.send("k-wrong", "pick", {"slot": "S1"}, attempt=2)
    agent.wait(lambda: agent.core.counters["refused_released"] == 2, "the second refusal")
    assert world.side_effect_count("forklift_1", "k-wrong") == 0


def test_failure_after_execution_began_is_final_and_cached(
    make_agent: Callable[..., Agent], world: World
) -> None:
    first, second = make_agent("forklift_1"), make_agent("forklift_2")
    first.send("k-a", "pick", {"slot": "A1"})
    first.final_answer("k-a")
    second.send("k-b", "pick", {"slot": "A1"})  # the pallet is gone: the pick fails there
    failed = second.final_answer("k-b")
    assert (failed.state, failed.status_code) == (State.FAILED, 500)
    assert "empty" in json.loads(failed.result_json)["error"]

    retry = second.send("k-b", "pick", {"slot": "A1"}, attempt=2)
    assert retry is not None and retry.replayed
    assert (retry.state, retry.result_json) == (State.FAILED, failed.result_json)
    assert world.side_effect_count("forklift_2", "k-b") == 1


def test_full_queue_answers_busy_without_storing_then_runs_the_retry_once(
    make_agent: Callable[..., Agent], world: World
) -> None:
    agent = make_agent("amr_1", capacity=1, time_scale=0.05)
    agent.send("k-long", "move_to_waypoint", {"waypoint": "W8"})
    busy = agent.send("k-next", "dock", {"dock": "D2"})
    assert busy is not None and (busy.state, busy.status_code) == (State.REJECTED, 429)
    assert agent.store.check("amr_1", "k-next") is None
    # A retry of the running key is still answered from the store, not refused as busy.
    duplicate = agent.send("k-long", "move_to_waypoint", {"waypoint": "W8"}, attempt=2)
    assert duplicate is not None and duplicate.status_code == 409
    assert agent.core.load().queue_depth == 1

    agent.final_answer("k-long")
    agent.wait(lambda: agent.core.load().queue_depth == 0, "capacity to free")
    retried = agent.send("k-next", "dock", {"dock": "D2"}, attempt=2)
    assert retried is not None and retried.status_code == 202
    assert agent.final_answer("k-next").status_code == 200
    assert world.side_effect_count("amr_1", "k-next") == 1


@pytest.mark.parametrize(
    ("key", "robot_id", "command_type", "payload", "fragment"),
    [
        ("", "forklift_1", "pick", '{"slot": "A1"}', "key"),
        ("has space", "forklift_1", "pick", '{"slot": "A1"}', "key"),
        ("k" * 129, "forklift_1", "pick", '{"slot": "A1"}', "key"),
        ("ключ", "forklift_1", "pick", '{"slot": "A1"}', "key"),
        ("k-1", "forklift_1", "pick", "{slot: A1}", "not valid JSON"),
        ("k-1", "forklift_1", "pick", '"A1"', "JSON object"),
        ("k-1", "forklift_1", "fly", '{"slot": "A1"}', "unknown command type"),
        ("k-1", "forklift_9", "pick", '{"slot": "A1"}', "delivered to 'forklift_1'"),
        ("k-1", "forklift_1", "pick", '{"slot": "A1", "force": true}', "Extra inputs"),
        ("k-1", "forklift_1", "pick", '{"slot": "' + "A" * 70_000 + '"}', "byte limit"),
    ],
)
def test_malformed_commands_get_400_and_store_nothing(
    make_agent: Callable[..., Agent],
    key: str,
    robot_id: str,
    command_type: str,
    payload: str,
    fragment: str,
) -> None:
    agent = make_agent()
    answer = agent.send(key, command_type, payload, robot_id=robot_id)
    assert answer is not None
    assert (answer.state, answer.status_code) == (State.REJECTED, 400)
    assert fragment in answer.message
    assert agent.store.stats()["records"] == 0
    # Still healthy: a valid command right after runs normally.
    agent.send("k-ok", "move_to_waypoint", {"waypoint": "W1"})
    assert agent.final_answer("k-ok").status_code == 200


def test_command_type_the_robot_cannot_do_is_refused(make_agent: Callable[..., Agent]) -> None:
    agent = make_agent("amr_1")
    answer = agent.send("k-1", "pick", {"slot": "A1"})
    assert answer is not None and answer.status_code == 400
    assert "a amr cannot pick" in answer.message
    assert agent.store.check("amr_1", "k-1") is None


def test_expired_key_is_refused_and_explained(
    make_agent: Callable[..., Agent], world: World
) -> None:
    clock = ManualClock()
    agent = make_agent("amr_1", clock=clock, default_retention_s=60.0, tombstone_retention_s=3600.0)
    agent.send("k-old", "dock", {"dock": "D1"})
    agent.final_answer("k-old")
    clock.now += 61
    assert agent.core.collect_garbage(max_batches=10).records_purged == 1

    answer = agent.send("k-old", "dock", {"dock": "D1"}, attempt=2)
    assert answer is not None
    assert (answer.state, answer.status_code) == (State.EXPIRED, 410)
    assert "use the status check" in answer.message
    status = agent.core.check_key("k-old")
    assert (status.found, status.state, status.status_code) == (True, State.EXPIRED, 200)
    assert "expired" in status.message and "refused" in status.message
    assert world.side_effect_count("amr_1", "k-old") == 1


def test_expired_key_policy_new_runs_the_key_again(
    make_agent: Callable[..., Agent], world: World
) -> None:
    clock = ManualClock()
    agent = make_agent("amr_1", clock=clock, default_retention_s=60.0, expired_key_policy="new")
    agent.send("k-old", "move_to_waypoint", {"waypoint": "W2"})
    agent.final_answer("k-old")
    clock.now += 61
    agent.core.collect_garbage(max_batches=10)
    assert "treated as a new command" in agent.core.check_key("k-old").message
    agent.send("k-old", "move_to_waypoint", {"waypoint": "W2"}, attempt=2)
    agent.wait(lambda: world.side_effect_count("amr_1", "k-old") == 2, "the second run")


def test_crash_recovery_interrupts_picks_and_resumes_moves(world: World, tmp_path: Path) -> None:
    config = StoreConfig(path=tmp_path / "forklift_1")
    # A previous agent process claimed both and died before finishing either.
    with IdempotencyStore.open(config, owner="dead-boot/1/1") as previous:
        for key, command_type, payload in (
            ("k-pick", "pick", {"slot": "A3"}),
            ("k-move", "move_to_waypoint", {"waypoint": "W2"}),
        ):
            previous.claim(
                scope="forklift_1",
                key=key,
                robot_id="forklift_1",
                command_type=command_type,
                payload_json=json.dumps(payload),
            )

    agent = Agent(world, tmp_path, "forklift_1")
    try:
        interrupted = agent.final_answer("k-pick")
        assert (interrupted.state, interrupted.status_code) == (State.INTERRUPTED, 500)
        assert "reconciliation" in interrupted.message
        resumed = agent.final_answer("k-move")
        assert resumed.state == State.COMPLETED
        assert world.side_effect_count("forklift_1", "k-pick") == 0
        assert world.side_effect_count("forklift_1", "k-move") == 1
        retry = agent.send("k-pick", "pick", {"slot": "A3"}, attempt=2)
        assert retry is not None and retry.replayed and retry.state == State.INTERRUPTED
        assert world.snapshot()["slots"]["A3"] == "P-3"
    finally:
        agent.close()


def test_exact_transport_repeats_are_dropped_but_retries_are_answered(
    make_agent: Callable[..., Agent],
) -> None:
    agent = make_agent(dedup_window=RecentDeliveries())
    assert agent.send("k-1", "dock", {"dock": "D1"}, attempt=1) is not None
    assert agent.send("k-1", "dock", {"dock": "D1"}, attempt=1) is None
    assert agent.core.counters["transport_repeats_dropped"] == 1
    retry = agent.send("k-1", "dock", {"dock": "D1"}, attempt=2)
    assert retry is not None and retry.status_code in (200, 409)


def test_store_not_window_guards_correctness(
    make_agent: Callable[..., Agent], world: World
) -> None:
    """With a window too small to remember anything, duplicates still never execute."""
    agent = make_agent(dedup_window=RecentDeliveries(max_entries=1))
    for _ in range(3):
        for key in ("k-a", "k-b"):  # alternate so the one-entry window always forgets
            agent.send(key, "move_to_waypoint", {"waypoint": "W3"}, attempt=1)
    agent.final_answer("k-a")
    agent.final_answer("k-b")
    assert world.side_effect_count("forklift_1", "k-a") == 1
    assert world.side_effect_count("forklift_1", "k-b") == 1
    assert agent.core.counters["transport_repeats_dropped"] == 0


def test_status_check_reports_state_and_is_read_only(make_agent: Callable[..., Agent]) -> None:
    agent = make_agent()
    unknown = agent.core.check_key("never-seen")
    assert (unknown.found, unknown.state) == (False, State.UNKNOWN)
    invalid = agent.core.check_key("bad key")
    assert (invalid.found, invalid.status_code) == (False, 400)

    agent.send("k-1", "dock", {"dock": "D3"})
    final = agent.final_answer("k-1")
    status = agent.core.check_key("k-1")
    assert (status.found, status.state, status.status_code) == (True, State.COMPLETED, 200)
    assert status.result_json == final.result_json
    assert status.created_at <= status.expires_at
    before = agent.store.check("forklift_1", "k-1")
    agent.core.check_key("k-1")
    assert agent.store.check("forklift_1", "k-1") == before


def test_load_is_reported_while_executing(make_agent: Callable[..., Agent]) -> None:
    agent = make_agent("amr_2", capacity=3, time_scale=0.05)
    agent.send("k-1", "move_to_waypoint", {"waypoint": "W8"})
    agent.send("k-2", "dock", {"dock": "D2"})
    agent.wait(busy_with(agent, "k-1"), "k-1 to run")
    load = agent.core.load()
    assert (load.queue_depth, load.capacity, load.busy, load.current_key) == (2, 3, True, "k-1")
    agent.final_answer("k-2")
    agent.wait(lambda: agent.core.load().queue_depth == 0, "the queue to drain")
    assert agent.core.load().busy is False
    assert agent.load_changes >= 4


def test_stop_mid_command_leaves_the_claim_durable(world: World, tmp_path: Path) -> None:
    agent = Agent(world, tmp_path, "amr_3", time_scale=0.5)
    agent.send("k-long", "move_to_waypoint", {"waypoint": "W8"})
    agent.wait(busy_with(agent, "k-long"), "the move to start")
    agent.close()
    with IdempotencyStore.open(StoreConfig(path=tmp_path / "amr_3"), recover=False) as store:
        record = store.check("amr_3", "k-long")
    assert isinstance(record, Record) and record.state == State.IN_PROGRESS
    assert not isinstance(record, Tombstone)


def test_only_commands_signed_for_this_robot_run_and_forgeries_are_answered_nowhere(
    make_agent: Callable[..., Agent], world: World
) -> None:
    keyring = FleetKeyring.generate()
    agent = make_agent(
        verifier=CommandVerifier(keyring.for_robot("forklift_1")),
        dedup_window=RecentDeliveries(),
    )
    genuine = Delivery(
        key="wms:k-1",
        client_id="wms",
        robot_id="forklift_1",
        command_type="pick",
        payload_json='{"slot": "A1"}',
    )
    key_id, tag = CommandSigner(keyring).sign(genuine)
    forgeries = [
        genuine,  # unsigned
        dataclasses.replace(genuine, auth_key_id=key_id, auth_tag="0" * 64),
        dataclasses.replace(genuine, auth_key_id="k9", auth_tag=tag),
    ]
    for forged in forgeries:
        assert agent.core.submit(forged) is None
    assert agent.answers == [], "a forger is told nothing"
    assert agent.store.check("forklift_1", "wms:k-1") is None, "nothing stored"
    assert agent.core.counters["auth_rejected"] == 3
    # The forgeries, identical in content, did not enter the dedup window: the genuine
    # command still runs, once.
    answer = agent.core.submit(dataclasses.replace(genuine, auth_key_id=key_id, auth_tag=tag))
    assert answer is not None and answer.status_code == 202
    assert agent.final_answer("wms:k-1").state == State.COMPLETED
    assert world.side_effect_count("forklift_1", "wms:k-1") == 1


def test_a_stale_replicas_commands_are_dropped_unanswered_and_the_fence_survives_a_restart(
    make_agent: Callable[..., Agent], world: World
) -> None:
    agent = make_agent()

    def fenced(key: str, token: int, waypoint: str) -> Delivery:
        return Delivery(
            key=key,
            client_id="wms",
            robot_id="forklift_1",
            command_type="move_to_waypoint",
            payload_json=json.dumps({"waypoint": waypoint}),
            fencing_token=token,
        )

    first = agent.core.submit(fenced("wms:new-holder", 3, "W1"))
    assert first is not None and first.status_code == 202
    assert agent.final_answer("wms:new-holder").state == State.COMPLETED
    # The replica that held the robot before (token 2) must not act after its successor.
    assert agent.core.submit(fenced("wms:stale", 2, "W2")) is None
    assert agent.store.check("forklift_1", "wms:stale") is None
    assert not [answer for answer in agent.answers if answer.key == "wms:stale"]
    assert agent.core.counters["fenced_stale"] == 1
    # A lone orchestrator holds no lease (token 0): never fenced.
    lone = agent.core.submit(fenced("wms:lone", 0, "W3"))
    assert lone is not None and lone.status_code == 202
    assert agent.final_answer("wms:lone").state == State.COMPLETED
    agent.close()

    restarted = make_agent()
    assert restarted.core.fence.highest == 3
    assert restarted.core.submit(fenced("wms:stale", 2, "W2")) is None
    assert world.side_effect_count("forklift_1", "wms:stale") == 0
    assert world.side_effect_count("forklift_1", "wms:new-holder") == 1


def test_a_202_held_for_a_command_started_at_once_is_replaced_by_its_final_result(
    make_agent: Callable[..., Agent], world: World
) -> None:
    """Delayed acknowledgement: the idle robot's 202 waits; the final result, published
    first, makes it unnecessary, so it is never sent. The claim itself was durable."""
    held = DelayedAcks(60.0)  # longer than any test: only the final result can end it
    agent = make_agent("amr_1", delayed_acks=held)
    answer = agent.send("k-dock", "dock", {"dock": "D1"})
    assert answer is not None and answer.status_code == 202  # what the claim answered
    assert agent.final_answer("k-dock").state == State.COMPLETED
    assert [a.status_code for a in agent.answers if a.key == "k-dock"] == [200]
    assert agent.core.counters["acks_superseded"] == 1 and held.held() == 0
    assert world.side_effect_count("amr_1", "k-dock") == 1


def test_a_queued_command_is_acknowledged_at_once_and_a_long_one_after_the_delay(
    make_agent: Callable[..., Agent],
) -> None:
    """Only a command the worker starts at once has its 202 held, for ``delay_s``: one
    that waits behind another is answered at once, and one that runs longer than the
    delay gets its 202 then, before its final result."""
    agent = make_agent("forklift_1", time_scale=0.1, delayed_acks=DelayedAcks(0.05))
    agent.send("k-long", "pick", {"slot": "A1"})
    agent.send("k-queued", "place", {"slot": "B1"})
    assert [a.status_code for a in agent.answers if a.key == "k-queued"] == [202]
    agent.wait(lambda: any(a.key == "k-long" for a in agent.answers), "the held 202")
    assert [a.status_code for a in agent.answers if a.key == "k-long"] == [202]
    assert agent.final_answer("k-long").status_code == 200
    assert [a.status_code for a in agent.answers if a.key == "k-long"] == [202, 200]
    assert agent.core.counters["acks_superseded"] == 0
