"""Two orchestrator replicas sharing PostgreSQL (store, log, leases) and one fleet.

Replicas and robots run in this process: real OrchestratorCores on a real PostgreSQL
database, real AgentCores on real LMDB stores, the real world model as the side-effect
oracle. Between them is an in-memory link that broadcasts every robot answer to every
replica, as DDS does. A "crashed" replica is one that stops being pumped and renewing its
leases; the same failover between real processes with kill -9 is in
test_replica_nodes.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.agent.core import AgentCore
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.events import replay
from fleet_idempotency.orchestrator.core import (
    OrchestratorCore,
    SubmitRequest,
    robot_key,
)
from fleet_idempotency.orchestrator.replica import (
    ReplicaLeases,
    ReplicaSettings,
    open_shared_log,
    open_shared_store,
)
from fleet_idempotency.protocol import Answer, Delivery
from fleet_idempotency.robots.simulated import SimulatedRobot
from fleet_idempotency.sim.world import World
from fleet_idempotency.sim.world_link import LocalWorldLink
from fleet_idempotency.store import IdempotencyStore, State, StoreConfig

from support.in_process import FAST_ORCHESTRATOR, QuietLogger
from support.paths import FLEET_FILE

FLEET = load_fleet(FLEET_FILE)
TIMEOUT_S = 30.0
LEASE_TTL_S = 1.0
FAST = FAST_ORCHESTRATOR


class Replica:
    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.store = open_shared_store(url, default_recovery_policy="resume")
        self.events = open_shared_log(url, durable=True)
        self.core = OrchestratorCore(
            fleet=FLEET, store=self.store, events=self.events, settings=FAST, replicated=True
        )
        self.leases = ReplicaLeases(
            self.core,
            ReplicaSettings(store_url=url, name=name, lease_ttl_s=LEASE_TTL_S),
            [spec.id for spec in FLEET.robots],
            on_change=lambda: None,
            log=lambda _message: None,
        )
        self.alive = True
        # Deliveries it made, kept so a test can replay a stale holder's sends.
        self.sent: list[Delivery] = []

    def crash(self) -> None:
        """Stop dead: no more pumping, renewing or releasing (what kill -9 leaves)."""
        self.alive = False
        self.leases.keeper.stop(release=False)

    def close(self) -> None:
        if self.alive:
            self.leases.close()
        else:
            self.leases.table.close()
        self.store.close()
        self.events.close()


class Cluster:
    def __init__(self, root: Path, url: str) -> None:
        self.world = World(FLEET.world)
        self.replicas = [Replica("replica-a", url), Replica("replica-b", url)]
        self.agents: dict[str, AgentCore] = {}
        self._inbox: list[Answer] = []
        self._inbox_lock = threading.Lock()
        for spec in FLEET.robots:
            robot = SimulatedRobot(
                spec.id, spec.type, LocalWorldLink(self.world), spec.start, time_scale=0.0
            )
            agent = AgentCore(
                backend=robot,
                store=IdempotencyStore.open(StoreConfig(path=root / "agents" / spec.id)),
                capacity=spec.capacity,
                publish=self._broadcast,
                logger=QuietLogger(),
            )
            agent.start()
            self.agents[spec.id] = agent

    def _broadcast(self, answer: Answer) -> None:
        with self._inbox_lock:
            self._inbox.append(answer)

    def pump(self) -> None:
        for replica in self.replicas:
            if not replica.alive:
                continue
            replica.leases.keeper.step()
            replica.core.follow_log()
            for robot_id, agent in self.agents.items():
                load = agent.load()
                replica.core.on_status(robot_id, load.queue_depth, load.capacity)
            for delivery in replica.core.tick():
                replica.sent.append(delivery)
                self.agents[delivery.robot_id].submit(delivery)
        with self._inbox_lock:
            answers, self._inbox = self._inbox, []
        for answer in answers:
            for replica in self.replicas:
                if replica.alive:
                    replica.core.on_result(answer)

    def run_until(self, condition: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + TIMEOUT_S
        while not (value := condition()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.pump()
            time.sleep(0.005)
        return value

    def final(self, client: str, key: str) -> bool:
        found = self.replicas[0].store.check(client, key)
        return found is not None and getattr(found, "state", State.UNKNOWN).is_final

    def effects(self, client: str, key: str, robot: str) -> int:
        return self.world.side_effect_count(robot, robot_key(client, key))

    def close(self) -> None:
        for replica in self.replicas:
            replica.close()
        for agent in self.agents.values():
            agent.stop()
            agent.store.close()


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[Cluster]:
    made = Cluster(tmp_path, postgres_url)
    yield made
    made.close()


def submit(replica: Replica, key: str, robot: str, command: str, payload: dict[str, Any]) -> Any:
    return replica.core.submit(SubmitRequest("wms", key, robot, command, json.dumps(payload)))


def test_the_same_key_at_both_replicas_at_once_is_accepted_once_and_runs_once(
    cluster: Cluster,
) -> None:
    a, b = cluster.replicas
    cluster.pump()  # replica-a steps first: it holds every robot
    assert set(a.leases.keeper.held()) == {spec.id for spec in FLEET.robots}
    assert b.leases.keeper.held() == {}
    codes: dict[str, list[int]] = {}
    for n in range(10):
        key = f"race-{n}"
        start = threading.Barrier(2)
        answers: list[int] = []

        def send(
            replica: Replica,
            key: str = key,
            start: threading.Barrier = start,
            answers: list[int] = answers,
        ) -> None:
            start.wait()
            answers.append(submit(replica, key, "amr_1", "dock", {"dock": "D2"}).status_code)

        threads = [threading.Thread(target=send, args=(replica,)) for replica in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        codes[key] = sorted(answers)
    assert all(answers == [202, 409] for answers in codes.values()), codes
    cluster.run_until(lambda: all(cluster.final("wms", key) for key in codes), "every race key")
    assert all(cluster.effects("wms", key, "amr_1") == 1 for key in codes)


def test_a_submit_to_the_replica_without_the_lease_is_run_by_the_holder(
    cluster: Cluster,
) -> None:
    a, b = cluster.replicas
    cluster.pump()
    assert submit(b, "via-b", "forklift_1", "pick", {"slot": "A1"}).status_code == 202
    cluster.run_until(lambda: cluster.final("wms", "via-b"), "the command accepted by b")
    assert cluster.effects("wms", "via-b", "forklift_1") == 1
    assert [d.key for d in a.sent] == [robot_key("wms", "via-b")] and b.sent == []
    # The replica that accepted it answers its waiting client from the shared store.
    waited = b.core.final_answer("wms", "via-b", 1.0)
    assert waited is not None and waited.state == State.COMPLETED


def test_kill_of_the_lease_holder_mid_mission_loses_nothing_and_repeats_nothing(
    cluster: Cluster,
) -> None:
    a, b = cluster.replicas
    cluster.pump()
    keys = []
    for n in range(12):
        replica = (a, b)[n % 2]
        robot, command, payload = (
            ("amr_1", "dock", {"dock": "D2"}),
            ("amr_2", "move_to_waypoint", {"waypoint": "W1"}),
            ("forklift_2", "move_to_waypoint", {"waypoint": "W2"}),
        )[n % 3]
        assert submit(replica, f"m-{n}", robot, command, payload).status_code == 202
        keys.append((f"m-{n}", robot))
    cluster.run_until(lambda: a.sent, "replica-a to start dispatching")
    a.crash()
    tokens_before = {d.robot_id: d.fencing_token for d in a.sent}
    cluster.run_until(lambda: len(b.leases.keeper.held()) == len(FLEET.robots), "the takeover")
    cluster.run_until(lambda: all(cluster.final("wms", key) for key, _ in keys), "every command")
    for key, robot in keys:
        assert cluster.effects("wms", key, robot) == 1, key
    for robot, token in tokens_before.items():
        assert b.leases.keeper.held()[robot] > token, "the successor's token is higher"
    # The dead holder's deliveries, arriving late (a paused process, a slow network), are
    # dropped by the robots: their fence is the successor's token now.
    stale = [d for d in a.sent if d.robot_id in {d.robot_id for d in b.sent}]
    assert stale
    for delivery in stale:
        assert cluster.agents[delivery.robot_id].submit(delivery) is None
    assert sum(agent.counters["fenced_stale"] for agent in cluster.agents.values()) == len(stale)


def test_a_refusal_received_by_the_holder_answers_the_replica_that_accepted(
    cluster: Cluster,
) -> None:
    _a, b = cluster.replicas
    cluster.pump()
    refused = submit(b, "nowhere", "forklift_1", "move_to_waypoint", {"waypoint": "W99"})
    assert refused.status_code == 202
    cluster.run_until(
        lambda: b.core.final_answer("wms", "nowhere", 0.0), "the refusal to reach replica-b"
    )
    answer = b.core.final_answer("wms", "nowhere", 0.0)
    assert answer is not None and (answer.state, answer.status_code) == (State.REJECTED, 400)


def test_a_result_a_dead_replica_stored_but_never_logged_is_logged_by_the_next_to_start(
    cluster: Cluster, postgres_url: str
) -> None:
    a, _b = cluster.replicas
    cluster.pump()
    assert submit(a, "unlogged", "amr_1", "dock", {"dock": "D2"}).status_code == 202
    a.core.flush_events()
    # The store is written first; the result's event waits for the journal's next commit,
    # which this replica never makes.
    a.store.finish("wms", "unlogged", state=State.COMPLETED, status_code=200, result_json="{}")
    a.crash()
    assert replay(a.events.read()).keys[("wms", "unlogged")].state == State.ACCEPTED
    restarted = Replica("replica-a", postgres_url)
    try:
        restarted.core.repair_log()
        view = replay(restarted.events.read()).keys[("wms", "unlogged")]
        assert (view.state, view.status_code) == (State.COMPLETED, 200)
    finally:
        restarted.close()


def test_a_claim_its_dead_replica_never_logged_is_logged_by_the_replica_that_runs_it(
    cluster: Cluster,
) -> None:
    a, b = cluster.replicas
    cluster.pump()
    # Accepted and claimed by replica-a, whose ACCEPTED event waits for a commit it never
    # makes: it dies at once.
    assert submit(a, "unannounced", "amr_1", "dock", {"dock": "D2"}).status_code == 202
    a.crash()
    cluster.run_until(lambda: cluster.final("wms", "unannounced"), "the survivor to run it")
    b.core.flush_events()
    view = replay(b.events.read()).keys[("wms", "unannounced")]
    assert view.state == State.COMPLETED
    assert cluster.effects("wms", "unannounced", "amr_1") == 1
