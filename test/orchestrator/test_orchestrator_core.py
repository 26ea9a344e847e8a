"""The orchestrator's logic against real agent cores, real stores and the real world model.

The transport between them is an in-memory link that can lose results and silence a
robot; the same scenarios over real DDS between real processes are in
test_orchestrator_node.py.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.agent.core import AgentCore
from fleet_idempotency.auth import CommandSigner, CommandVerifier, FleetKeyring
from fleet_idempotency.description.fleet import FleetConfig, load_fleet
from fleet_idempotency.events import EventLogConfig, EventType, LmdbEventLog, replay
from fleet_idempotency.orchestrator import core as core_module
from fleet_idempotency.orchestrator.core import (
    MAX_ROBOT_CAPACITY,
    MAX_WAIT_TIMEOUT_S,
    OrchestratorCore,
    OrchestratorSettings,
    SubmitRequest,
    robot_key,
)
from fleet_idempotency.orchestrator.dispatch import (
    LOST_ANSWER_GRACE_S,
    Dispatcher,
    OnlineChange,
    PendingCommand,
    ResendReason,
    ResultEffect,
    RobotLane,
    StatusEffect,
)
from fleet_idempotency.protocol import Answer
from fleet_idempotency.robots.simulated import SimulatedRobot
from fleet_idempotency.sim.world import World
from fleet_idempotency.sim.world_link import LocalWorldLink
from fleet_idempotency.store import IdempotencyStore, State, StoreConfig

from support.in_process import FAST_ORCHESTRATOR, QuietLogger
from support.paths import FLEET_FILE

FLEET = load_fleet(FLEET_FILE)
TIMEOUT_S = 30.0
FAST = FAST_ORCHESTRATOR


class Fleet:
    """An orchestrator core and agent cores joined by a lossy in-memory link."""

    def __init__(
        self,
        root: Path,
        fleet: FleetConfig = FLEET,
        *,
        time_scale: float = 0.0,
        drop_results: float = 0.0,
        settings: OrchestratorSettings = FAST,
        capacities: dict[str, int] | None = None,
        keyring: FleetKeyring | None = None,
    ) -> None:
        self.root = root
        self.keyring = keyring
        self.fleet = fleet
        self.world = World(fleet.world)
        self.rng = random.Random(7)
        self.drop_results = drop_results
        self.settings = settings
        self.silenced: set[str] = set()
        self._inbox: list[Answer] = []
        self._inbox_lock = threading.Lock()
        self.dropped = 0
        self.agents: dict[str, AgentCore] = {}
        for spec in fleet.robots:
            robot = SimulatedRobot(
                spec.id, spec.type, LocalWorldLink(self.world), spec.start, time_scale=time_scale
            )
            store = IdempotencyStore.open(StoreConfig(path=root / "agents" / spec.id))
            capacity = (capacities or {}).get(spec.id, spec.capacity)
            agent = AgentCore(
                backend=robot,
                store=store,
                capacity=capacity,
                publish=self._deliver_answer,
                logger=QuietLogger(),
                verifier=CommandVerifier(keyring.for_robot(spec.id)) if keyring else None,
            )
            agent.start()
            self.agents[spec.id] = agent
        self.orchestrator = self.open_orchestrator()

    def open_orchestrator(self, **store_options: Any) -> OrchestratorCore:
        self.orch_store = IdempotencyStore.open(
            StoreConfig(
                path=self.root / "orchestrator" / "keys",
                default_recovery_policy="resume",
                recovery_policy_by_type={},
            ),
            **store_options,
        )
        self.events = LmdbEventLog(EventLogConfig(path=self.root / "orchestrator" / "events"))
        core = OrchestratorCore(
            fleet=self.fleet,
            store=self.orch_store,
            events=self.events,
            settings=self.settings,
            signer=CommandSigner(self.keyring) if self.keyring else None,
        )
        core.restore()
        return core

    def _deliver_answer(self, answer: Answer) -> None:
        with self._inbox_lock:
            self._inbox.append(answer)

    def pump(self) -> None:
        for robot_id, agent in self.agents.items():
            if robot_id not in self.silenced:
                load = agent.load()
                self.orchestrator.on_status(robot_id, load.queue_depth, load.capacity)
        for delivery in self.orchestrator.tick():
            if delivery.robot_id not in self.silenced:
                self.agents[delivery.robot_id].submit(delivery)
        with self._inbox_lock:
            answers, self._inbox = self._inbox, []
        for answer in answers:
            if answer.robot_id in self.silenced or (
                self.drop_results and self.rng.random() < self.drop_results
            ):
                self.dropped += 1
                continue
            self.orchestrator.on_result(answer)

    def run_until(
        self, condition: Callable[[], Any], what: str, timeout_s: float = TIMEOUT_S
    ) -> Any:
        deadline = time.monotonic() + timeout_s
        while not (value := condition()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.pump()
            time.sleep(0.002)
        return value

    def submit(
        self, client: str, key: str, robot: str, command_type: str, payload: dict[str, Any] | str
    ) -> Any:
        payload_json = payload if isinstance(payload, str) else json.dumps(payload)
        return self.orchestrator.submit(
            SubmitRequest(client, key, robot, command_type, payload_json)
        )

    def final(self, client: str, key: str) -> Any:
        return self.run_until(
            lambda: (
                (r := self.orch_store.check(client, key)) is not None
                and getattr(r, "state", State.UNKNOWN).is_final
                and r
            ),
            f"{client}/{key} to finish",
        )

    def effects(self, client: str, key: str, robot: str) -> int:
        return self.world.side_effect_count(robot, robot_key(client, key))

    def close(self) -> None:
        for agent in self.agents.values():
            agent.stop()
            agent.store.close()
        self.orch_store.close()
        self.events.close()


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    fleets: list[Fleet] = []

    def make(**options: Any) -> Fleet:
        fleet = Fleet(tmp_path / f"fleet{len(fleets)}", **options)
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()


def test_a_submit_retried_ten_times_executes_once_and_answers_202_409_200(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(time_scale=0.05)
    pick = {"slot": "A1"}
    codes = [fleet.submit("wms", "order-1", "forklift_1", "pick", pick).status_code]
    codes.append(fleet.submit("wms", "order-1", "forklift_1", "pick", pick).status_code)
    fleet.run_until(lambda: fleet.agents["forklift_1"].load().current_key, "execution start")
    for _ in range(4):  # while the robot executes
        codes.append(fleet.submit("wms", "order-1", "forklift_1", "pick", pick).status_code)
    final = fleet.final("wms", "order-1")
    answers = [fleet.submit("wms", "order-1", "forklift_1", "pick", pick) for _ in range(4)]
    codes += [answer.status_code for answer in answers]

    assert codes == [202] + [409] * 5 + [200] * 4
    assert all(a.replayed and a.result_json == final.result_json for a in answers)
    assert json.loads(final.result_json)["item"] == "P-1"
    assert fleet.effects("wms", "order-1", "forklift_1") == 1


def test_lost_results_are_recovered_by_retries_each_command_once(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(drop_results=0.5)
    keys = []
    for index in range(30):
        robot = ("amr_1", "amr_2", "amr_3")[index % 3]
        waypoint = f"W{index % 8 + 1}"
        answer = fleet.submit(
            "wms", f"move-{index}", robot, "move_to_waypoint", {"waypoint": waypoint}
        )
        assert answer.status_code == 202
        keys.append((f"move-{index}", robot))
    for key, _robot in keys:
        assert fleet.final("wms", key).state == State.COMPLETED
    assert fleet.dropped > 0
    assert fleet.orchestrator.counters["retries"] > 0
    for key, robot in keys:
        assert fleet.effects("wms", key, robot) == 1
    # Each re-send says why it was made, and each result which send it answered of how
    # many: the figures that tell a lost answer from a late one.
    fleet.orchestrator.flush_events()
    events = list(fleet.events.read())
    reasons = {ResendReason(e.detail["why"]) for e in events if e.event_type == EventType.RETRIED}
    assert reasons and reasons <= set(ResendReason)
    results = [e.detail for e in events if e.event_type == EventType.RESULT]
    assert len(results) == len(keys)
    assert all(1 <= r["answered_attempt"] <= r["attempts"] for r in results)
    assert any(r["attempts"] > 1 for r in results)


def test_orchestrator_crash_and_restart_loses_nothing_and_repeats_nothing(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(time_scale=0.02)
    docks = [("amr_1", "D1"), ("amr_2", "D2"), ("amr_3", "D3")]
    for index in range(12):
        robot, dock = docks[index % 3]
        assert (
            fleet.submit("wms", f"dock-{index}", robot, "dock", {"dock": dock}).status_code == 202
        )
    fleet.run_until(lambda: fleet.orchestrator.counters["dispatched"] >= 3, "some dispatches")
    # Crash: the first orchestrator is abandoned mid-flight, its claims owned by "us".
    fleet.orch_store.close()
    fleet.events.close()
    fleet.orchestrator = fleet.open_orchestrator(owner="restarted", owner_alive=lambda _o: False)
    assert fleet.orchestrator.counters["restored"] >= 1

    for index in range(12):
        assert fleet.final("wms", f"dock-{index}").state == State.COMPLETED
    for index in range(12):
        robot = docks[index % 3][0]
        assert fleet.effects("wms", f"dock-{index}", robot) == 1

    fleet.orchestrator.flush_events()  # the log follows the store by at most one flush
    events = list(fleet.events.read())
    identities = [event.identity for event in events]
    assert len(identities) == len(set(identities))
    assert [event.sequence for event in events] == list(range(1, len(events) + 1))
    replayed = replay(events)
    for record in fleet.orch_store.iter_records():
        view = replayed.keys[(record.scope, record.key)]
        assert (view.state, view.status_code, view.result_json) == (
            record.state,
            record.status_code,
            record.result_json,
        )


def test_a_silent_robot_holds_its_commands_others_proceed_then_it_drains_once(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    fleet.run_until(
        lambda: all(v["online"] for v in fleet.orchestrator.load().values()), "all robots online"
    )
    fleet.silenced.add("amr_1")
    fleet.run_until(lambda: not fleet.orchestrator.load()["amr_1"]["online"], "amr_1 offline")
    for index in range(3):
        fleet.submit("wms", f"silent-{index}", "amr_1", "dock", {"dock": "D1"})
        fleet.submit("wms", f"other-{index}", "amr_2", "dock", {"dock": "D2"})
    for index in range(3):
        fleet.final("wms", f"other-{index}")
    assert fleet.orchestrator.load()["amr_1"]["queued"] == 3
    # No retry storm to a dead robot (amr_2's commands may be re-sent on a loaded machine:
    # FAST retries after 50 ms, so only amr_1's count).
    fleet.orchestrator.flush_events()
    to_silent = [
        e
        for e in fleet.events.read()
        if e.robot_id == "amr_1" and e.event_type in (EventType.RETRIED, EventType.DISPATCHED)
    ]
    assert to_silent == []

    fleet.silenced.clear()
    for index in range(3):
        assert fleet.final("wms", f"silent-{index}").state == State.COMPLETED
        assert fleet.effects("wms", f"silent-{index}", "amr_1") == 1
    fleet.orchestrator.flush_events()
    kinds = [event.event_type for event in fleet.events.read()]
    assert EventType.ROBOT_OFFLINE in kinds and EventType.ROBOT_ONLINE in kinds


def test_a_burst_of_ten_times_capacity_is_absorbed_without_busy_or_retry_storm(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(
        time_scale=0.01,
        capacities={"amr_1": 2},
        settings=OrchestratorSettings(retry_initial_s=0.5, retry_max_s=2.0, offline_after_s=1.0),
    )
    fleet.run_until(lambda: fleet.orchestrator.load()["amr_1"]["online"], "amr_1 online")
    for index in range(20):
        waypoint = ("W1", "W2")[index % 2]
        assert (
            fleet.submit(
                "wms", f"burst-{index}", "amr_1", "move_to_waypoint", {"waypoint": waypoint}
            ).status_code
            == 202
        )
    peak = 0
    while fleet.orchestrator.pending():
        fleet.pump()
        peak = max(peak, fleet.orchestrator.load()["amr_1"]["in_flight"])
        time.sleep(0.002)
    assert peak <= 2, "never more in flight than the robot's advertised capacity"
    assert fleet.agents["amr_1"].counters["answer_429"] == 0
    for index in range(20):
        assert fleet.effects("wms", f"burst-{index}", "amr_1") == 1
    # Stated bound: each command waits at most its queue position x its duration, with
    # retries at >= 0.5 s intervals; 20 short moves need far fewer than one retry each.
    assert fleet.orchestrator.counters["retries"] <= 20


@pytest.mark.parametrize(
    ("client", "key", "robot", "command_type", "payload", "field"),
    [
        ("w m s", "k-1", "amr_1", "dock", '{"dock": "D1"}', "client_id"),
        ("wms", "bad key", "amr_1", "dock", '{"dock": "D1"}', "key"),
        ("wms", "k-1", "amr_99", "dock", '{"dock": "D1"}', "robot_id"),
        ("wms", "k-1", "amr_1", "pick", '{"slot": "A1"}', "command_type"),
        ("wms", "k-1", "amr_1", "dock", "dock D1", "payload_json"),
        ("wms", "k-1", "amr_1", "dock", '{"dock": "D1", "fast": 1}', "payload_json.fast"),
        ("wms", "k-1", "amr_1", "dock", '{"dock": "' + "D" * 70_000 + '"}', "payload_json"),
    ],
)
def test_bad_submits_get_400_naming_the_field_and_store_nothing(
    make_fleet: Callable[..., Fleet],
    client: str,
    key: str,
    robot: str,
    command_type: str,
    payload: str,
    field: str,
) -> None:
    fleet = make_fleet()
    answer = fleet.submit(client, key, robot, command_type, payload)
    assert (answer.state, answer.status_code) == (State.REJECTED, 400)
    assert field in answer.message
    assert fleet.orch_store.stats()["records"] == 0
    assert fleet.orchestrator.pending() == 0


def test_mismatch_and_full_queue_and_scope_per_client(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet(
        settings=OrchestratorSettings(queue_capacity_per_robot=1, offline_after_s=60)
    )
    assert fleet.submit("wms", "k-1", "amr_1", "dock", {"dock": "D1"}).status_code == 202
    mismatch = fleet.submit("wms", "k-1", "amr_1", "dock", {"dock": "D2"})
    assert mismatch.status_code == 422 and "fingerprint" in mismatch.message
    full = fleet.submit("wms", "k-2", "amr_1", "dock", {"dock": "D2"})
    assert (full.state, full.status_code) == (State.REJECTED, 429)
    assert fleet.orch_store.check("wms", "k-2") is None
    # Another client's k-1 is another operation, with its own robot-side key.
    assert fleet.submit("other", "k-1", "amr_2", "dock", {"dock": "D2"}).status_code == 202
    assert robot_key("wms", "k-1") != robot_key("other", "k-1")


def test_robot_refusal_releases_the_key_and_check_key_explains(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    # Forklifts handle pallet slots; S1 is an arm station: refused before any movement.
    assert fleet.submit("wms", "k-bad", "forklift_1", "pick", {"slot": "S1"}).status_code == 202
    fleet.run_until(lambda: fleet.orchestrator.counters["robot_rejected"], "the refusal")
    assert fleet.orch_store.check("wms", "k-bad") is None
    status, robot_query = fleet.orchestrator.check_key("wms", "k-bad")
    assert (status.state, status.status_code, robot_query) == (State.REJECTED, 400, None)
    assert "station" in status.message
    waited = fleet.orchestrator.final_answer("wms", "k-bad", 0.1)
    assert waited is not None and waited.status_code == 400
    # Released: the client may submit the key again and it is evaluated again.
    assert fleet.submit("wms", "k-bad", "forklift_1", "pick", {"slot": "S1"}).status_code == 202
    assert fleet.effects("wms", "k-bad", "forklift_1") == 0
    fleet.orchestrator.flush_events()
    replayed = replay(fleet.events.read())
    assert replayed.keys[("wms", "k-bad")].state == State.ACCEPTED


def test_a_submit_woken_by_the_refusal_reads_the_refusal(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    # A waiting submit wakes the instant the store releases the key; whatever it reads
    # then is what it answers. Read at that instant, from inside the release.
    woken_with: list[Any] = []
    release = fleet.orch_store.release

    def release_then_read(client_id: str, key: str) -> Any:
        released = release(client_id, key)
        woken_with.append(fleet.orchestrator.final_answer(client_id, key, 0.0))
        return released

    fleet.orch_store.release = release_then_read  # type: ignore[method-assign]
    assert fleet.submit("wms", "k-bad", "forklift_1", "pick", {"slot": "S1"}).status_code == 202
    fleet.run_until(lambda: woken_with, "the refusal")
    assert woken_with[0] is not None and woken_with[0].status_code == 400


def test_check_key_points_at_the_robot_while_in_flight(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet(time_scale=0.05)
    fleet.submit("wms", "k-far", "amr_3", "move_to_waypoint", {"waypoint": "W8"})
    fleet.run_until(lambda: fleet.orchestrator.load()["amr_3"]["in_flight"], "dispatch")
    status, robot_query = fleet.orchestrator.check_key("wms", "k-far")
    assert status.state == State.ACCEPTED
    assert robot_query == ("amr_3", robot_key("wms", "k-far"))
    fleet.final("wms", "k-far")
    status, robot_query = fleet.orchestrator.check_key("wms", "k-far")
    assert (status.state, robot_query) == (State.COMPLETED, None)


def test_results_for_commands_never_sent_are_ignored_and_counted(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    stray = Answer(
        key="someone:else",
        client_id="x",
        robot_id="amr_1",
        command_type="dock",
        state=State.COMPLETED,
        status_code=200,
    )
    fleet.orchestrator.on_result(stray)
    fleet.orchestrator.on_result(stray)
    assert fleet.orchestrator.counters["results_ignored"] == 2
    assert fleet.orch_store.stats()["records"] == 0


def test_long_client_keys_map_to_bounded_robot_keys() -> None:
    long_key = "k" * 128
    mapped = robot_key("wms", long_key)
    assert len(mapped) <= 128 and mapped.startswith("wms:#")
    assert mapped == robot_key("wms", long_key)
    assert robot_key("wms", "k-1") == "wms:k-1"


@pytest.mark.parametrize(
    "wait", [float("nan"), float("inf"), -1.0, MAX_WAIT_TIMEOUT_S + 1], ids=str
)
def test_an_impossible_wait_is_a_400_naming_it_and_stores_nothing(
    make_fleet: Callable[..., Fleet], wait: float
) -> None:
    fleet = make_fleet()
    answer = fleet.orchestrator.submit(
        SubmitRequest("wms", "k-wait", "amr_1", "dock", '{"dock": "D1"}', wait_timeout_s=wait)
    )
    assert (answer.state, answer.status_code) == (State.REJECTED, 400)
    assert "wait_timeout_sec" in answer.message
    assert fleet.orch_store.check("wms", "k-wait") is None
    fleet.orchestrator.flush_events()
    assert list(fleet.events.read()) == []


def test_a_deeply_nested_payload_is_a_400_and_stores_nothing(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    answer = fleet.submit("wms", "k-deep", "amr_1", "dock", "[" * 5000 + "]" * 5000)
    assert (answer.state, answer.status_code) == (State.REJECTED, 400)
    assert "levels" in answer.message
    assert fleet.orch_store.stats()["records"] == 0
    fleet.orchestrator.flush_events()
    assert list(fleet.events.read()) == []


@pytest.mark.parametrize(
    ("robot_id", "heard_on", "queue_depth", "capacity", "counter"),
    [
        ("amr_2", "amr_1", 0, 2, "status_wrong_topic"),
        ("amr_1", "amr_1", 0, 0, "status_invalid"),
        ("amr_1", "amr_1", 0, MAX_ROBOT_CAPACITY + 1, "status_invalid"),
        ("amr_1", "amr_1", 2**32 - 1, 2, "status_invalid"),
        ("ghost", None, 0, 2, "status_unknown_robot"),
    ],
)
def test_absurd_or_misaddressed_statuses_are_counted_and_change_nothing(
    make_fleet: Callable[..., Fleet],
    robot_id: str,
    heard_on: str | None,
    queue_depth: int,
    capacity: int,
    counter: str,
) -> None:
    fleet = make_fleet()
    before = fleet.orchestrator.load()
    fleet.orchestrator.on_status(robot_id, queue_depth, capacity, heard_on=heard_on)
    assert fleet.orchestrator.counters[counter] == 1
    assert fleet.orchestrator.load() == before


def test_a_signed_fleet_runs_every_command_and_robots_verify_each_delivery(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(keyring=FleetKeyring.generate(), drop_results=0.3)
    for index in range(6):
        assert fleet.submit("wms", f"s-{index}", "amr_1", "dock", {"dock": "D1"}).status_code == 202
    for index in range(6):
        assert fleet.final("wms", f"s-{index}").state == State.COMPLETED
        assert fleet.effects("wms", f"s-{index}", "amr_1") == 1
    # Re-sends (attempt + 1) are signed anew and accepted as well.
    assert fleet.orchestrator.counters["retries"] > 0
    assert fleet.agents["amr_1"].counters["auth_rejected"] == 0


def test_robots_with_keys_refuse_an_unsigned_orchestrator(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, keyring=FleetKeyring.generate())
    try:
        fleet.orchestrator.signer = None  # e.g. an orchestrator started without its keyring
        fleet.submit("wms", "u-1", "amr_1", "dock", {"dock": "D1"})
        fleet.run_until(
            lambda: fleet.agents["amr_1"].counters["auth_rejected"] >= 2, "refused re-sends"
        )
        assert fleet.effects("wms", "u-1", "amr_1") == 0
        assert fleet.agents["amr_1"].store.check("amr_1", robot_key("wms", "u-1")) is None
    finally:
        fleet.close()


def test_only_a_status_that_changes_something_wakes_dispatch(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    core = fleet.orchestrator
    assert core.on_status("amr_1", 0, 4) is True  # first heard: online
    assert core.on_status("amr_1", 0, 4) is False  # a heartbeat: nothing to dispatch
    assert core.on_status("amr_1", 1, 4) is False
    assert core.on_status("amr_1", 0, 8) is True  # a new capacity may free slots
    assert core.on_status("ghost", 0, 4) is False


def test_the_offline_checks_of_a_fleet_share_wake_ups() -> None:

    now = [10.0]
    lanes = {f"amr_{i}": RobotLane(f"amr_{i}", "amr", 4) for i in range(1, 6)}
    dispatcher = Dispatcher(
        lanes,
        OrchestratorSettings(offline_after_s=3.0),
        clock=lambda: now[0],
        rng=random.Random(1),
    )
    for index, robot_id in enumerate(lanes):  # heard at 10.1, 10.18, ... 10.42
        now[0] = 10.1 + 0.08 * index
        dispatcher.on_status(robot_id, 0, 4)
    dispatcher.due()
    # One wake-up checks all five, at most a grid step (0.5 s) after the first is due.
    assert dispatcher.next_deadline() == 13.5
    now[0] = 13.5
    _due, changes = dispatcher.due()
    assert sorted(change.robot_id for change in changes if not change.online) == sorted(lanes)
    assert dispatcher.next_deadline() is None


def test_retry_counts_are_kept_for_recent_keys_only(
    make_fleet: Callable[..., Fleet], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core_module, "DUPLICATE_COUNTS_KEPT", 2)
    fleet = make_fleet()
    for key in ("a", "b", "c"):
        fleet.submit("wms", key, "amr_1", "move_to_waypoint", {"waypoint": "W1"})
    fleet.final("wms", "c")

    def retry_counts(key: str) -> list[int]:
        fleet.submit("wms", key, "amr_1", "move_to_waypoint", {"waypoint": "W1"})
        fleet.orchestrator.flush_events()
        return [
            e.detail["count"]
            for e in fleet.events.events_for("wms", key)
            if e.event_type is EventType.DUPLICATE_SUPPRESSED
        ]

    assert retry_counts("a") == [1]
    assert retry_counts("a") == [1, 2]
    assert retry_counts("b") == [1]
    assert retry_counts("c") == [1]  # three keys retried, two counts kept: "a" is dropped
    assert retry_counts("b") == [1, 2]  # recent keys keep counting
    assert retry_counts("a") == [1, 2, 1]  # an old key starts again, memory stays bounded


def test_an_acknowledged_command_is_not_re_sent_while_its_robot_holds_it(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Re-sends start at 1 ms and double up to 1 s. A robot that answered 202 holds the
    # command durably, and its statuses say so: while it executes (for seconds) the
    # orchestrator sends nothing more, instead of 1, 2, 4, ... 512 ms, then every second.
    fleet = make_fleet(
        time_scale=0.15,
        settings=OrchestratorSettings(
            retry_initial_s=0.001, retry_max_s=1.0, retry_jitter=0.0, offline_after_s=5.0
        ),
    )
    fleet.run_until(lambda: fleet.orchestrator.load()["amr_1"]["online"], "amr_1 online")
    started = time.monotonic()
    answer = fleet.submit("wms", "slow", "amr_1", "move_to_waypoint", {"waypoint": "W3"})
    assert answer.status_code == 202
    fleet.final("wms", "slow")
    executed_s = time.monotonic() - started
    assert executed_s > 1.0, "the move must outlast the longest backoff to tell the schedules apart"
    # Before the 202 arrives a re-send may go at 1, 2, 4 ms; none after it.
    assert fleet.orchestrator.counters["retries"] <= 3, executed_s
    assert fleet.effects("wms", "slow", "amr_1") == 1


def one_robot_dispatcher(
    settings: OrchestratorSettings, capacity: int, clock: Callable[[], float] = lambda: 100.0
) -> tuple[Dispatcher, RobotLane]:
    """A dispatcher for amr_1 alone, online with ``capacity``, on a test clock."""
    lane = RobotLane("amr_1", "amr", capacity)
    dispatcher = Dispatcher({"amr_1": lane}, settings, clock=clock, rng=random.Random(1))
    dispatcher.on_status("amr_1", 0, capacity)
    return dispatcher, lane


def dock_command(key: str) -> PendingCommand:
    return PendingCommand("wms", key, "amr_1", "dock", "{}", "f", f"wms:{key}", claim_id="1")


def first_send(dispatcher: Dispatcher, key: str) -> PendingCommand:
    """Queue a dock under ``key`` and take its first send from ``due`` (re-sends of
    earlier commands may fall due beside it)."""
    command = dock_command(key)
    dispatcher.enqueue(command)
    (due,) = [d for d in dispatcher.due()[0] if d.command is command]
    assert not due.is_retry
    return command


def robot_answer(command: PendingCommand, code: int, attempt: int = 1) -> Answer:
    """amr_1's answer to ``attempt`` of ``command``: 202 accepted or 200 completed."""
    state = State.ACCEPTED if code == 202 else State.COMPLETED
    return Answer(command.robot_key, "wms", "amr_1", "dock", state, code, attempt=attempt)


def steady_dispatcher(now: list[float], **settings: Any) -> tuple[Dispatcher, RobotLane]:
    """amr_1 with room for 4, on the clock ``now[0]``: no jitter, never offline, first
    re-send 0.5 s until answers are timed, then no sooner than 0.1 s (``settings``
    override these)."""
    steady = dict(
        retry_initial_s=0.5,
        retry_min_s=0.1,
        retry_max_s=5.0,
        retry_jitter=0.0,
        offline_after_s=60.0,
    )
    return one_robot_dispatcher(
        OrchestratorSettings(**{**steady, **settings}), capacity=4, clock=lambda: now[0]
    )


def test_a_status_that_shows_a_lost_result_brings_its_re_send_forward() -> None:
    now = [100.0]
    # Answers on this test clock take no time: a floor of 0.5 s holds.
    dispatcher, _lane = steady_dispatcher(now, retry_min_s=0.5, unanswered_per_robot=3)
    commands = [dock_command(f"k-{i}") for i in range(3)]
    for command in commands:
        dispatcher.enqueue(command)
    assert len(dispatcher.due()[0]) == 3
    for command in commands:
        dispatcher.on_result(robot_answer(command, 202))
    # Acknowledged: nothing is re-sent for the last-resort 30 s while the robot holds them.
    assert all(c.next_send_at == 100.0 + 30.0 for c in commands)
    assert dispatcher.on_status("amr_1", 3, 4) is StatusEffect.NOTED
    # The robot now holds two: it finished the oldest, whose result never came.
    assert dispatcher.on_status("amr_1", 2, 4) is StatusEffect.WAKE
    assert commands[0].next_send_at == 100.0 + 0.5 and commands[1].next_send_at == 130.0
    now[0] = 100.5
    (resend,) = dispatcher.due()[0]
    assert resend.command is commands[0] and resend.is_retry
    # Should that answer be lost as well, the next re-send follows the usual doubling from
    # here, not the longest backoff.
    assert commands[0].next_send_at == 100.5 + 1.0
    # Its result on the way beats the re-send: then nothing is sent.
    assert dispatcher.on_status("amr_1", 1, 4) is StatusEffect.WAKE  # k-1 finished too
    dispatcher.on_result(robot_answer(commands[1], 200))
    now[0] = 101.4
    assert dispatcher.due()[0] == []


def test_the_first_re_send_waits_for_as_long_as_the_robot_takes_to_answer() -> None:
    now = [100.0]
    dispatcher, lane = one_robot_dispatcher(
        OrchestratorSettings(
            retry_initial_s=0.5, retry_min_s=0.2, retry_max_s=5.0, retry_jitter=0.0
        ),
        capacity=100,
        clock=lambda: now[0],
    )

    def answer(command: PendingCommand, attempt: int, after_s: float) -> None:
        now[0] += after_s
        dispatcher.on_result(robot_answer(command, 202, attempt))

    # Nothing measured yet: the configured first backoff.
    first = first_send(dispatcher, "k-0")
    assert first.next_send_at == now[0] + 0.5
    # A loaded robot answers each send 2 s later: re-sending at 0.5 s would only add to
    # its backlog, so the first re-send moves out to when an answer can be expected.
    for index in range(1, 20):
        answer(first_send(dispatcher, f"k-{index}"), attempt=1, after_s=2.0)
    late = first_send(dispatcher, "k-late")
    assert 2.0 <= late.next_send_at - now[0] <= 5.0
    # An answer to an earlier send of a re-sent command says nothing about this send's
    # time (Karn's rule), and a quick robot brings the first re-send back down.
    settled_estimate = lane.answer_time.mean_s
    now[0] = late.next_send_at
    (resend,) = [d for d in dispatcher.due()[0] if d.command is late]
    assert resend.is_retry and late.attempt == 2
    answer(late, attempt=1, after_s=4.0)
    assert lane.answer_time.mean_s == settled_estimate
    # A quick robot brings it down to the floor, below the unmeasured first backoff: a
    # lost answer then costs a fifth of a second, not half of one.
    for index in range(40):
        answer(first_send(dispatcher, f"quick-{index}"), attempt=1, after_s=0.01)
    assert first_send(dispatcher, "k-quick").next_send_at == pytest.approx(now[0] + 0.2)


def test_re_sends_stretch_the_first_re_send_until_an_answer_is_timed_again() -> None:
    # A robot that suddenly takes longer than its estimate: every send would be re-sent
    # before its answer came, no answer would time a send (Karn's rule), and the estimate
    # would never learn. Each re-send of an unanswered command doubles the lane's first
    # re-send instead, until an answer to a latest send is timed again.
    now = [100.0]
    dispatcher, lane = one_robot_dispatcher(
        OrchestratorSettings(
            retry_initial_s=0.5, retry_min_s=0.1, retry_max_s=5.0, retry_jitter=0.0
        ),
        capacity=100,
        clock=lambda: now[0],
    )

    quick = first_send(dispatcher, "quick")
    now[0] += 0.01
    dispatcher.on_result(robot_answer(quick, 200))
    waits = []
    for index in range(3):
        slow = first_send(dispatcher, f"slow-{index}")
        waits.append(slow.next_send_at - now[0])
        now[0] = slow.next_send_at
        assert [d.is_retry for d in dispatcher.due()[0] if d.command is slow] == [True]
        dispatcher.on_result(robot_answer(slow, 200, attempt=1))  # too late: not timed
    assert waits == pytest.approx([0.1, 0.2, 0.4])
    assert lane.resend_backoff == 8.0
    timed = first_send(dispatcher, "timed")
    now[0] += 0.05
    dispatcher.on_result(robot_answer(timed, 200))
    assert lane.resend_backoff == 1.0
    assert first_send(dispatcher, "after").next_send_at - now[0] == pytest.approx(
        lane.first_resend_after(dispatcher.settings)
    )
    assert lane.first_resend_after(dispatcher.settings) < 0.8


def test_a_robot_back_with_a_new_boot_id_gets_what_it_had_in_flight_at_once() -> None:
    # A robot host restarts in ~3 s, within offline_after_s: it is never marked offline,
    # and without its boot id the commands it lost would wait out a backoff that grew
    # while nothing could answer.
    now = [100.0]
    dispatcher, lane = steady_dispatcher(now)
    assert dispatcher.on_status("amr_1", 0, 4, "boot-1") is StatusEffect.NOTED
    command = first_send(dispatcher, "k")
    for _ in range(3):  # unanswered: the robot's process is gone
        now[0] = command.next_send_at
        assert [d.command for d in dispatcher.due()[0]] == [command]
    assert command.next_send_at - now[0] == pytest.approx(4.0)
    now[0] += 0.5
    # The same process: a heartbeat, nothing to re-send yet.
    assert dispatcher.on_status("amr_1", 0, 4, "boot-1") is StatusEffect.NOTED
    assert dispatcher.due() == ([], [])
    # A new process: what the last one had in flight goes again now.
    assert dispatcher.on_status("amr_1", 0, 4, "boot-2") is StatusEffect.WAKE
    due, changes = dispatcher.due()
    assert [(d.command, d.is_retry) for d in due] == [(command, True)]
    assert changes == [OnlineChange("amr_1", True, 1, 0, restarted=True)]
    # The unanswered re-sends were the old process's silence, not a slow robot.
    assert lane.resend_backoff == 1.0
    assert command.next_send_at - now[0] == pytest.approx(
        lane.first_resend_after(dispatcher.settings)
    )


def test_an_idle_robot_naming_its_last_command_has_that_lost_answer_fetched_at_once() -> None:
    now = [100.0]
    dispatcher, lane = steady_dispatcher(now)
    lost = first_send(dispatcher, "lost")
    assert lost.next_send_at == 100.5
    now[0] = 100.03
    # Still holding it, or idle after another command: nothing says its answer was lost.
    assert dispatcher.on_status("amr_1", 1, 4, last_finished_key=lost.robot_key) is (
        StatusEffect.NOTED
    )
    assert dispatcher.on_status("amr_1", 0, 4, last_finished_key="wms:other") is (
        StatusEffect.NOTED
    )
    # Idle after finishing it, and no answer came: re-sent after a moment's grace, not at
    # 0.5 s, without stretching the lane's first re-send.
    assert dispatcher.on_status("amr_1", 0, 4, last_finished_key=lost.robot_key) is (
        StatusEffect.WAKE
    )
    assert lost.next_send_at == pytest.approx(100.03 + LOST_ANSWER_GRACE_S)
    now[0] = lost.next_send_at
    assert [(d.command, d.is_retry) for d in dispatcher.due()[0]] == [(lost, True)]
    assert lane.resend_backoff == 1.0
    dispatcher.on_result(robot_answer(lost, 200, attempt=2))
    # An answer that beats the grace: the re-send is skipped.
    quick = first_send(dispatcher, "quick")
    dispatcher.on_status("amr_1", 0, 4, last_finished_key=quick.robot_key)
    dispatcher.on_result(robot_answer(quick, 200))
    now[0] += 1.0
    assert dispatcher.due()[0] == []


def test_a_lost_answer_is_fetched_once_and_only_after_answers_usually_trail_the_status() -> None:
    # Statuses and answers are taken on different threads; under load answers fell ~0.5 s
    # behind the idle status naming them, and a fixed 20 ms grace re-sent most commands.
    now = [100.0]
    dispatcher, _lane = steady_dispatcher(now)
    late = first_send(dispatcher, "late")
    now[0] = 100.01
    dispatcher.on_status("amr_1", 0, 4, last_finished_key=late.robot_key)
    assert late.next_send_at == pytest.approx(100.01 + LOST_ANSWER_GRACE_S)
    now[0] = late.next_send_at
    assert [d.command for d in dispatcher.due()[0]] == [late]
    # Fetched once: a heartbeat naming it again leaves the re-send to the backoff.
    next_send_at = late.next_send_at
    now[0] = 100.05
    assert dispatcher.on_status("amr_1", 0, 4, last_finished_key=late.robot_key) is (
        StatusEffect.NOTED
    )
    assert late.next_send_at == next_send_at
    now[0] = 100.31  # the first send's answer, 0.3 s after the status: late, not lost
    assert dispatcher.on_result(robot_answer(late, 200, attempt=1))[0] is ResultEffect.SETTLED

    def acknowledged_then_named(key: str) -> PendingCommand:
        command = first_send(dispatcher, key)
        dispatcher.on_result(robot_answer(command, 202, attempt=command.attempt))
        assert command.next_send_at - now[0] == pytest.approx(30.0)
        dispatcher.on_status("amr_1", 0, 4, last_finished_key=command.robot_key)
        return command

    # Now a fetch waits for what answers trailed by (0.3 s and its deviation), not 20 ms.
    named_at = now[0]
    lost = acknowledged_then_named("lost")
    assert lost.next_send_at - named_at == pytest.approx(0.3 + 4 * 0.15)
    now[0] = lost.next_send_at
    assert [d.command for d in dispatcher.due()[0]] == [lost]
    dispatcher.on_result(robot_answer(lost, 200, attempt=lost.attempt))
    # Answers that beat their status bring the wait back down to the floor.
    for index in range(40):
        prompt = first_send(dispatcher, f"prompt-{index}")
        dispatcher.on_result(robot_answer(prompt, 200))
        dispatcher.on_status("amr_1", 0, 4, last_finished_key=prompt.robot_key)
    named_at = now[0]
    again = acknowledged_then_named("again")
    assert again.next_send_at - named_at == pytest.approx(LOST_ANSWER_GRACE_S)


def test_each_re_send_carries_the_rule_that_made_it() -> None:
    now = [100.0]
    dispatcher, _lane = steady_dispatcher(now, unanswered_per_robot=4)

    def re_sent() -> list[tuple[str, ResendReason | None]]:
        return [(d.command.key, d.reason) for d in dispatcher.due()[0] if d.is_retry]

    unanswered = first_send(dispatcher, "unanswered")
    now[0] = unanswered.next_send_at
    assert re_sent() == [("unanswered", ResendReason.UNANSWERED)]
    dispatcher.on_result(robot_answer(unanswered, 200, attempt=2))
    held = first_send(dispatcher, "held")
    dispatcher.on_result(robot_answer(held, 202))
    now[0] = held.next_send_at  # acknowledged_resend_s later
    assert re_sent() == [("held", ResendReason.ACKNOWLEDGED)]
    dispatcher.on_result(robot_answer(held, 200, attempt=2))
    # The robot holds none of the two it acknowledged: their results were lost.
    results = [first_send(dispatcher, f"result-{i}") for i in range(2)]
    for command in results:
        dispatcher.on_result(robot_answer(command, 202))
    dispatcher.on_status("amr_1", 1, 4)
    now[0] = results[0].next_send_at
    assert re_sent() == [("result-0", ResendReason.LOST_RESULT)]
    dispatcher.on_result(robot_answer(results[0], 200, attempt=2))
    dispatcher.on_result(robot_answer(results[1], 200))
    answer = first_send(dispatcher, "answer")
    dispatcher.on_status("amr_1", 0, 4, last_finished_key=answer.robot_key)
    now[0] = answer.next_send_at
    assert re_sent() == [("answer", ResendReason.LOST_ANSWER)]
    dispatcher.on_result(robot_answer(answer, 200, attempt=2))
    first_send(dispatcher, "back")
    dispatcher.on_status("amr_1", 0, 4, "boot-1")
    dispatcher.on_status("amr_1", 0, 4, "boot-2")
    assert re_sent() == [("back", ResendReason.ROBOT_BACK)]


def test_a_robot_gets_new_commands_as_fast_as_it_answers_the_last_ones() -> None:
    dispatcher, lane = one_robot_dispatcher(
        OrchestratorSettings(unanswered_per_robot=2, offline_after_s=60.0), capacity=16
    )
    commands = [dock_command(f"k-{i}") for i in range(5)]
    for command in commands:
        dispatcher.enqueue(command)
    # Room for 16, but only two go out before the robot answers anything.
    assert [d.command.key for d in dispatcher.due()[0]] == ["k-0", "k-1"]
    assert dispatcher.due()[0] == []
    dispatcher.on_result(robot_answer(commands[0], 202))
    assert [d.command.key for d in dispatcher.due()[0]] == ["k-2"]
    dispatcher.on_result(robot_answer(commands[1], 200))
    assert [d.command.key for d in dispatcher.due()[0]] == ["k-3"]
    # Answered commands still count against the robot's capacity, not against the window.
    assert len(lane.in_flight) == 3


def test_a_robot_process_gone_by_dds_liveliness_is_offline_at_once_and_back_gets_its_work() -> None:
    # An idle robot's status comes every idle_status_period_s (10 s); that its process is
    # gone, DDS says within its status lease: no wait for offline_after_s of silence.
    now = [100.0]
    dispatcher, _lane = steady_dispatcher(now)
    command = first_send(dispatcher, "k")
    now[0] += 0.1
    assert dispatcher.on_liveliness("amr_1", alive=False) is StatusEffect.WAKE
    assert dispatcher.due() == ([], [OnlineChange("amr_1", False, 1, 0)])
    now[0] = command.next_send_at + 5.0
    assert dispatcher.due() == ([], []), "nothing is sent to a robot that is gone"
    assert dispatcher.on_liveliness("amr_1", alive=False) is StatusEffect.NOTED
    # Its process back (or DDS hears it again): what it had in flight goes again now.
    assert dispatcher.on_liveliness("amr_1", alive=True) is StatusEffect.WAKE
    due, changes = dispatcher.due()
    assert [(d.command, d.is_retry) for d in due] == [(command, True)]
    assert changes == [OnlineChange("amr_1", True, 1, 0)]
    assert dispatcher.on_liveliness("ghost", alive=False) is StatusEffect.UNKNOWN_ROBOT
