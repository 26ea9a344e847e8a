"""Hypothesis against real processes: no input kills a node, and no refused input is stored.

One fleet per test in its own DDS domain: the world simulator, the orchestrator and two
agents, all real processes, commands authenticated with keyrings the project's own
tooling provisions. Each example is a batch of adversarial messages of every kind the
nodes receive (SubmitCommand, CheckKey to the fleet and to a robot, FleetCommand,
CommandResult, RobotStatus), every field drawn from empty, huge, non-ASCII, control
characters, NaN/inf, negative, deeply nested JSON, wrong robots and wrong types. After
each batch every process is alive; every few batches a normal command must complete; at
the end the stores and the event log hold nothing for what was refused, and the world
acted only for commands the orchestrator accepted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet_idempotency.bringup.keys import provision, robot_keyring_path
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.events import EventLogConfig, EventType, LmdbEventLog
from fleet_idempotency.orchestrator.core import robot_key
from fleet_idempotency.store import IdempotencyStore, StoreConfig

from support.fleet_harness import FleetHarness
from support.paths import FLEET_FILE

ROBOTS = {"forklift_1": "forklift", "amr_1": "amr", "amr_2": "amr"}
# Started without a keyring: fuzzed commands reach its parser and store (the others drop
# them unread, having checked the tag first).
UNAUTHENTICATED = "amr_2"
EXAMPLES = 80
HEALTH_EVERY = 10
ANSWER_TIMEOUT_S = 20.0

# --- strategies ---------------------------------------------------------------------------
# Text that rclpy can carry (no lone surrogates: they cannot be encoded as UTF-8).
any_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
nasty_text = st.one_of(
    any_text,
    st.just(""),
    st.just("x" * 70_000),  # over every size limit
    st.just("k\x00ey"),
    st.just("ключ-🙂"),
    st.just("k" * 129),
    st.text(st.characters(min_codepoint=0, max_codepoint=31), min_size=1, max_size=8),
)
nested = st.integers(min_value=17, max_value=6000).map(lambda n: "[" * n + "]" * n)
payloads = st.one_of(
    nasty_text,
    nested,
    st.just('{"slot": NaN}'),
    st.just('{"x": Infinity, "y": 0}'),
    st.just('{"x": -1e308, "y": 1e999}'),
    st.just('{"slot": "A1", "speed": 3}'),
    st.just('{"slot": ' + "[" * 40 + "]" * 40 + "}"),
    st.just("[1, 2, 3]"),
    st.just('"A1"'),
    st.dictionaries(any_text, st.one_of(any_text, st.integers(), st.floats()), max_size=3).map(
        lambda d: json.dumps(d, allow_nan=True)
    ),
)
robot_ids = st.one_of(st.sampled_from([*ROBOTS, "ghost_9", ""]), nasty_text)
command_types = st.one_of(
    st.sampled_from(["pick", "place", "dock", "move_to_waypoint", "teleport", ""]), nasty_text
)
floats = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e300]), st.floats())
uint8 = st.integers(min_value=0, max_value=255)
uint16 = st.integers(min_value=0, max_value=65535)
uint32 = st.integers(min_value=0, max_value=2**32 - 1)
uint64 = st.integers(min_value=0, max_value=2**64 - 1)
fuzz_keys = st.one_of(nasty_text, st.text("abc-_.XYZ0123456789", min_size=1, max_size=12))

submits = st.fixed_dictionaries(
    {
        "kind": st.just("submit"),
        "client_id": st.one_of(st.just("fz"), nasty_text),
        "key": fuzz_keys,
        "robot_id": robot_ids,
        "command_type": command_types,
        "payload_json": payloads,
        # Positive waits would only slow the run down; their validation is in the sample.
        "wait_timeout_sec": floats.filter(lambda v: not (0 < v < 1e6)),
    }
)
checks = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["fleet_check", "robot_check"]),
        "client_id": nasty_text,
        "key": fuzz_keys,
        "robot": st.sampled_from(list(ROBOTS)),
    }
)
commands = st.fixed_dictionaries(
    {
        "kind": st.just("command"),
        "topic_robot": st.sampled_from(list(ROBOTS)),
        "idempotency_key": fuzz_keys,
        "client_id": nasty_text,
        "robot_id": robot_ids,
        "command_type": command_types,
        "payload_json": payloads,
        "payload_sha256": nasty_text,
        "attempt": uint32,
        "auth_key_id": st.one_of(st.just("k1"), nasty_text),
        "auth_tag": st.one_of(st.just("0" * 64), nasty_text),
        # Half the draws carry no lease (0, never fenced): one early draw near 2**64 raises
        # the unauthenticated robot's fence above nearly every later random token, which
        # are then dropped unread, and once no fuzzed command reached its parser at all.
        "fencing_token": st.one_of(st.just(0), uint64),
    }
)
results = st.fixed_dictionaries(
    {
        "kind": st.just("result"),
        "idempotency_key": fuzz_keys,
        "client_id": nasty_text,
        "robot_id": robot_ids,
        "command_type": command_types,
        "state": uint8,
        "status_code": uint16,
        "replayed": st.booleans(),
        "result_json": payloads,
        "message": nasty_text,
        "payload_sha256": nasty_text,
        "attempt": uint32,
    }
)
statuses = st.fixed_dictionaries(
    {
        "kind": st.just("status"),
        "topic_robot": st.sampled_from(list(ROBOTS)),
        "robot_id": robot_ids,
        "robot_type": nasty_text,
        "x": floats,
        "y": floats,
        "theta": floats,
        "queue_depth": uint32,
        "capacity": uint32,
        "busy": st.booleans(),
        "current_key": nasty_text,
        "boot_id": nasty_text,
        "last_finished_key": nasty_text,
    }
)
batches = st.lists(st.one_of(submits, checks, commands, results, statuses), min_size=1, max_size=10)


# --- the fleet ----------------------------------------------------------------------------
class Adversary:
    """Sends batches from the test's own DDS participant and remembers what was refused."""

    def __init__(self, fleet: FleetHarness) -> None:
        from rclpy.qos import QoSProfile

        from fleet_idempotency.msg import CommandResult, RobotStatus
        from fleet_idempotency.ros.qos import SERVICE_QOS, STATUS_QOS
        from fleet_idempotency.srv import CheckKey

        self.fleet = fleet
        self.results = fleet.node.create_publisher(CommandResult, "/fleet/results", 256)
        # The statuses' own durability (a volatile publisher matches no subscriber of
        # STATUS_QOS), with room for a whole batch of them.
        status_qos = QoSProfile(
            depth=64, reliability=STATUS_QOS.reliability, durability=STATUS_QOS.durability
        )
        self.statuses = {
            robot: fleet.node.create_publisher(RobotStatus, f"/fleet/{robot}/status", status_qos)
            for robot in ROBOTS
        }
        self.robot_checks = {
            robot: fleet.node.create_client(
                CheckKey, f"/fleet/{robot}/check_key", qos_profile=SERVICE_QOS
            )
            for robot in ROBOTS
        }
        self.refused: set[tuple[str, str]] = set()
        self.accepted: set[tuple[str, str]] = set()
        self.answers: dict[int, int] = {}
        self.command_keys: set[str] = set()

    def send(self, batch: list[dict[str, Any]]) -> None:
        from fleet_idempotency.msg import CommandResult, FleetCommand, RobotStatus
        from fleet_idempotency.srv import CheckKey

        pending: list[tuple[dict[str, Any], Any]] = []
        for item in batch:
            fields = {k: v for k, v in item.items() if k not in ("kind", "topic_robot", "robot")}
            kind = item["kind"]
            if kind == "submit":
                pending.append((item, self.fleet.submit_async(**_submit_arguments(fields))))
            elif kind == "fleet_check":
                request = CheckKey.Request(client_id=item["client_id"], idempotency_key=item["key"])
                pending.append((item, self.fleet._fleet_check.call_async(request)))
            elif kind == "robot_check":
                request = CheckKey.Request(client_id=item["client_id"], idempotency_key=item["key"])
                pending.append((item, self.robot_checks[item["robot"]].call_async(request)))
            elif kind == "command":
                self.command_keys.add(fields["idempotency_key"])
                self.fleet._publishers[item["topic_robot"]].publish(FleetCommand(**fields))
            elif kind == "result":
                self.results.publish(CommandResult(**fields))
            else:
                self.statuses[item["topic_robot"]].publish(RobotStatus(**fields))
        self.fleet.spin_until(
            lambda: all(future.done() for _item, future in pending),
            "every fuzzed request to be answered",
            timeout_s=ANSWER_TIMEOUT_S,
        )
        for item, future in pending:
            response = future.result()
            self.answers[response.status_code] = self.answers.get(response.status_code, 0) + 1
            if item["kind"] == "submit":
                scope = (item["client_id"], item["key"])
                (self.refused if response.status_code == 400 else self.accepted).add(scope)
            assert response.status_code != 500, f"an internal error answered {item}: {response}"


def _submit_arguments(fields: dict[str, Any]) -> dict[str, Any]:
    wait = fields.pop("wait_timeout_sec")
    payload = fields.pop("payload_json")
    return {**fields, "payload": payload, "wait_timeout_s": wait}


def assert_all_alive(fleet: FleetHarness) -> None:
    for name, process in fleet.children.processes.items():
        assert process.poll() is None, (
            f"{name} died with {process.returncode}:\n{fleet.children.log(name)[-3000:]}"
        )


@pytest.mark.slow
def test_fuzzed_messages_never_kill_a_node_and_nothing_refused_is_stored(
    fleet: FleetHarness, tmp_path: Path
) -> None:
    keyrings = tmp_path / "keys"
    provision(load_fleet(FLEET_FILE), keyrings)
    for robot_id, robot_type in ROBOTS.items():
        auth = (
            {}
            if robot_id == UNAUTHENTICATED
            else {"auth_keyring": str(robot_keyring_path(keyrings, robot_id))}
        )
        fleet.start_agent(robot_id, robot_type, **auth)
    fleet.start_orchestrator(auth_keyring=str(keyrings / "fleet.json"))
    adversary = Adversary(fleet)
    normal_keys: list[str] = []
    rounds = {"n": 0}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(batch=batches)
    def survive(batch: list[dict[str, Any]]) -> None:
        adversary.send(batch)
        assert_all_alive(fleet)
        rounds["n"] += 1
        if rounds["n"] % HEALTH_EVERY == 0:
            key = f"normal-{rounds['n']}"
            normal_keys.append(key)
            answer = fleet.submit("ops", key, "amr_1", "dock", {"dock": "D1"}, wait_timeout_s=30.0)
            if answer.status_code != 200:
                check = fleet.fleet_check("ops", key)
                raise AssertionError(
                    f"normal command: {answer.status_code} {answer.message!r}; check: "
                    f"{check.state} {check.status_code} {check.message!r}; after "
                    f"{[{k: str(v)[:40] for k, v in item.items()} for item in batch]}"
                )

    survive()
    assert_all_alive(fleet)
    # Every input was handled by design: none reached a callback's last-resort barrier.
    for name in fleet.children.processes:
        surprises = [
            line for line in fleet.children.log(name).splitlines() if ": unexpected " in line
        ]
        assert not surprises, f"{name} caught what its logic did not expect: {surprises[:3]}"
    assert adversary.refused, "the sample must include refused submits"
    for key in normal_keys:  # commands signed by the orchestrator ran, once each
        assert fleet.side_effects("amr_1", robot_key("ops", key)) == 1

    # What was refused left no trace; fuzzed FleetCommands (unsigned or forged) never ran.
    only_refused = adversary.refused - adversary.accepted
    root = fleet.store_dir / "orchestrator"
    with IdempotencyStore.open(StoreConfig(path=root / "keys"), readonly=True) as store:
        stored = {(r.scope, r.key) for r in store.iter_records()}
    assert not stored & only_refused
    with LmdbEventLog(EventLogConfig(path=root / "events"), readonly=True) as log:
        robot_level = (EventType.ROBOT_ONLINE, EventType.ROBOT_OFFLINE)
        logged = {(e.client_id, e.key) for e in log.read() if e.event_type not in robot_level}
    assert not logged & only_refused
    robot_side = {robot_key(client, key) for client, key in adversary.accepted} | {
        robot_key("ops", key) for key in normal_keys
    }
    # The unauthenticated robot answered every fuzzed command it parsed; a 400 stored nothing.
    answered = {(r.robot_id, r.idempotency_key): r.status_code for r in fleet.results}
    taken = {
        key
        for (robot_id, key), code in answered.items()
        if robot_id == UNAUTHENTICATED and code != 400
    }
    for robot_id in ROBOTS:
        config = StoreConfig(path=fleet.store_dir / robot_id)
        with IdempotencyStore.open(config, readonly=True) as store:
            stored_keys = {r.key for r in store.iter_records()}
        allowed = robot_side | (taken if robot_id == UNAUTHENTICATED else set())
        assert stored_keys <= allowed, f"{robot_id} stored keys nobody signed or it refused"
    acted = fleet.world_state()["side_effects"]
    for robot_id, by_key in acted.items():
        allowed = robot_side | (taken if robot_id == UNAUTHENTICATED else set())
        assert set(by_key) <= allowed, f"{robot_id} acted for keys nobody signed"
    assert any(code == 400 for code in answered.values()), "fuzz must reach a parser"
