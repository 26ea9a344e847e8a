"""Two orchestrator replica processes on one PostgreSQL database, robots over real DDS.

Everything is real: the world simulator, agent drivers and both orchestrators are
processes of their own, the database is a real PostgreSQL server, and the lease holder
is killed with SIGKILL mid-mission.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fleet_idempotency.bringup.postgres import LocalPostgres
from fleet_idempotency.orchestrator.dispatch import robot_key
from fleet_idempotency.orchestrator.postgres_leases import PostgresLeaseTable
from fleet_idempotency.store import State

from support.fleet_harness import BIN, FleetHarness
from support.paths import FLEET_FILE
from support.ros_support import ChildProcesses, wait_for

FINAL = {int(State.COMPLETED), int(State.FAILED), int(State.INTERRUPTED)}
ROBOTS = {"amr_1": "amr", "amr_2": "amr", "forklift_2": "forklift"}
WORK = {
    "amr_1": ("dock", {"dock": "D2"}),
    "amr_2": ("move_to_waypoint", {"waypoint": "W1"}),
    "forklift_2": ("move_to_waypoint", {"waypoint": "W2"}),
}


def start_replica(
    fleet: FleetHarness, children: ChildProcesses, name: str, url: str, context: Any
) -> Any:
    from fleet_idempotency.ros.fleet_client import FleetClient

    settings = {
        "fleet_file": str(FLEET_FILE),
        "store_dir": str(fleet.store_dir / name),
        "store_url": url,
        "replica_name": name,
        "lease_ttl_s": 2.0,
        "api_namespace": f"/fleet/{name}",
        "retry_initial_s": 0.3,
        "retry_max_s": 1.0,
    }
    args = [str(BIN / "orchestrator"), "--ros-args", "-r", f"__node:={name}"]
    for parameter, value in settings.items():
        args += ["-p", f"{parameter}:={value}"]
    children.spawn(name, args, fleet.env)
    client = FleetClient(context, f"client_{name}", api_namespace=f"/fleet/{name}")
    client.wait_for_services(timeout_s=60.0)
    return client


@pytest.fixture
def replica_fleet(
    fleet: FleetHarness, children: ChildProcesses, postgres_url: str, ros_context: Any
) -> Iterator[tuple[Any, Any]]:
    for robot_id, robot_type in ROBOTS.items():
        fleet.start_agent(robot_id, robot_type)
    first = start_replica(fleet, children, "replica_a", postgres_url, ros_context)
    # replica_a is up first: it takes every lease before replica_b asks.
    first.submit("wms", "warm-up", "amr_1", "dock", {"dock": "D1"}, wait_timeout_s=30)
    second = start_replica(fleet, children, "replica_b", postgres_url, ros_context)
    yield first, second
    first.close()
    second.close()
    # Before the database is dropped under them.
    for name in ("replica_a", "replica_b"):
        if children.processes[name].poll() is None:
            children.kill(name, signal.SIGTERM)


def wait_final(client: Any, key: str, timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.check("wms", key)
        if status.found and status.state in FINAL:
            return status
        assert time.monotonic() < deadline, f"{key} not final: {status}"
        time.sleep(0.1)


def test_duplicate_submits_to_both_replicas_at_once_are_accepted_once(
    fleet: FleetHarness, replica_fleet: tuple[Any, Any]
) -> None:
    clients = replica_fleet
    for n in range(5):
        key = f"both-{n}"
        start = threading.Barrier(2)
        codes: list[int] = []

        def send(
            client: Any,
            key: str = key,
            start: threading.Barrier = start,
            codes: list[int] = codes,
        ) -> None:
            start.wait()
            codes.append(client.submit("wms", key, "amr_2", *WORK["amr_2"]).response.status_code)

        threads = [threading.Thread(target=send, args=(client,)) for client in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(codes) in ([202, 409], [200, 409], [200, 202]), codes
        assert codes.count(202) + codes.count(200) >= 1
        wait_final(clients[1], key)
        assert fleet.side_effects("amr_2", robot_key("wms", key)) == 1


def holders(url: str) -> set[str]:
    table = PostgresLeaseTable(url)
    try:
        return {holder.partition("/")[0] for holder, _token in table.holders().values()}
    finally:
        table.close()


def test_kill_9_of_the_lease_holder_mid_mission_finishes_every_command_once(
    fleet: FleetHarness,
    children: ChildProcesses,
    replica_fleet: tuple[Any, Any],
    postgres_url: str,
    ros_context: Any,
) -> None:
    from fleet_idempotency.ros.fleet_client import FleetClient

    holder, survivor = replica_fleet
    assert holders(postgres_url) == {"replica_a"}
    # A client that knows both replicas' APIs, the dead one first.
    either = FleetClient(
        ros_context, "client_either", api_namespace=["/fleet/replica_a", "/fleet/replica_b"]
    )
    keys: list[tuple[str, str]] = []
    for n in range(12):
        robot_id = list(WORK)[n % 3]
        client = (holder, survivor)[n % 2]
        answer = client.submit("wms", f"mission-{n}", robot_id, *WORK[robot_id]).response
        assert answer.status_code == 202, answer.message
        keys.append((f"mission-{n}", robot_id))
    children.kill("replica_a")
    for key, robot_id in keys:
        status = wait_final(survivor, key)
        assert status.state == int(State.COMPLETED), (key, status)
        assert fleet.side_effects(robot_id, robot_key("wms", key)) == 1, key
    # A robot with no work (forklift_1) is taken over on the survivor's lease round, which
    # may come after the last mission finished.
    wait_for(lambda: holders(postgres_url) == {"replica_b"}, what="every lease on the survivor")
    # The survivor still serves new work for every robot, also to the client that tries
    # the dead replica first: its re-send reaches the survivor.
    try:
        for robot_id, (command, payload) in WORK.items():
            late = either.submit("wms", f"after-{robot_id}", robot_id, command, payload)
            assert late.response.status_code in (200, 202), late
            wait_final(survivor, f"after-{robot_id}")
    finally:
        either.close()


def test_a_database_restart_mid_mission_is_503_while_down_then_every_command_runs_once(
    fleet: FleetHarness,
    replica_fleet: tuple[Any, Any],
    postgres_server: LocalPostgres,
) -> None:
    holder, other = replica_fleet
    keys: list[tuple[str, str]] = []
    for n in range(6):
        robot_id = list(WORK)[n % 3]
        answer = (holder, other)[n % 2].submit("wms", f"db-{n}", robot_id, *WORK[robot_id])
        assert answer.response.status_code == 202, answer.response.message
        keys.append((f"db-{n}", robot_id))
    postgres_server.stop(mode="immediate")
    try:
        down = other.submit("wms", "while-down", "amr_1", *WORK["amr_1"], deadline_s=60.0)
        assert down.response.status_code == 503, down.response.message
        assert "unavailable" in down.response.message
    finally:
        postgres_server.start_again()
    # The same key again: new (200/202), or 409 when the client's own re-send of the
    # refused submit, still queued at the replica, was claimed once the database was back.
    again = other.submit("wms", "while-down", "amr_1", *WORK["amr_1"], deadline_s=60.0)
    assert again.response.status_code in (200, 202, 409), again.response.message
    keys.append(("while-down", "amr_1"))
    for key, robot_id in keys:
        status = wait_final(other, key)
        assert status.state == int(State.COMPLETED), (key, status)
        assert fleet.side_effects(robot_id, robot_key("wms", key)) == 1, key
