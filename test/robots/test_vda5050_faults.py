"""Faults around the ``vda5050`` backend, with real processes: an agent process, a
simulated vehicle process, a real password-protected Mosquitto, the world simulator as
the oracle. Each ends with every key executed at most once and every accepted command
final. VDA 5050 2.1 rules (section) pinned here:

- QoS 0 loses orders (6.2): the order is re-sent, byte-identical, until ``state`` shows it;
- the same orderId/orderUpdateId again is ignored (6.6.4.3): duplicates do not re-run;
- a new orderId while an order is active is refused (6.6.2 Figure 8, OTHER_ORDER_ACTIVE in
  3.0 6.1.4.6): a late duplicate of an old order while another runs does nothing, and our
  own order refused that way is released (REJECTED, retryable);
- the vehicle keeps its order while disconnected (6.2): a broker restart mid-order ends
  COMPLETED, once;
- nothing tells master control that a vehicle forgot its order but its restart (headerId
  from 0, 6.4): the key becomes INTERRUPTED, never re-sent;
- ``connection`` last will CONNECTIONBROKEN (6.14): commands are refused before any side
  effect until the vehicle is ONLINE again;
- after an agent crash the key is reconciled from ``state``, never published again: one
  the vehicle never took is INTERRUPTED, one it finished while the agent was down (after
  FINISHED, before the store's commit) is COMPLETED with its result, one side effect.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.bringup.processes import clean_dds_shared_memory
from fleet_idempotency.testing import BackendUnderTest, CommandSpec
from fleet_idempotency.testing.agent_under_test import AgentUnderTest, wait_until

from support.vda5050_stand import MANUFACTURER, Vda5050Stand, make_stand, needs_mosquitto

pytestmark = needs_mosquitto

REJECTED, COMPLETED, INTERRUPTED = 6, 3, 5
SHORT = CommandSpec("move_to_waypoint", {"x": 3.0, "y": 0.5})
SLOW = CommandSpec("move_to_waypoint", {"x": 40.0, "y": 0.5})


@pytest.fixture
def stand(ros_env: dict[str, str], ros_context: Any, tmp_path: Path) -> Iterator[Vda5050Stand]:
    made, close = make_stand(tmp_path, ros_env, ros_context, robot_id="vda_1", serial="F1")
    try:
        yield made
        made.assert_every_message_matches_the_official_schemas()
    finally:
        close()


@pytest.fixture
def agent(
    stand: Vda5050Stand, ros_env: dict[str, str], ros_context: Any, tmp_path: Path
) -> Iterator[AgentUnderTest]:
    subject = BackendUnderTest(
        backend="vda5050",
        robot_type="amr",
        params=stand.backend_params(),
        completes=SHORT,
        refused=CommandSpec("move_to_waypoint", {"waypoint": "NOWHERE"}),
        slow=SLOW,
        side_effects=stand.side_effects,
        robot_id="vda_1",
        reconciles_after_crash=True,
    )
    work = tmp_path / "agent"
    work.mkdir()
    running = AgentUnderTest(subject, env=ros_env, work_dir=work, context=ros_context)
    try:
        running.start()
        yield running
    finally:
        running.close()
        print(f"----- agent -----\n{running.log()[-4000:]}")


def orders_of(stand: Vda5050Stand, key: str) -> list[bytes]:
    return [p for p in stand.recorder.of("order") if json.loads(p)["orderId"] == key]


def running_order(stand: Vda5050Stand, key: str) -> None:
    stand.wait_state(lambda s: s["orderId"] == key and bool(s["nodeStates"]), f"{key} running")


def without_header(payload: bytes) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(payload)
    return {k: v for k, v in message.items() if k not in ("headerId", "timestamp")}


def header_ids(payloads: list[bytes]) -> list[int]:
    return [int(json.loads(p)["headerId"]) for p in payloads]


def test_a_lost_order_is_resent_the_same_under_new_headers_until_state_shows_it(
    stand: Vda5050Stand, agent: AgentUnderTest
) -> None:
    stand.faults(drop_orders=2)
    agent.send("lost-1", SHORT)
    final = agent.final("lost-1")
    assert final.state == COMPLETED, final
    sent = orders_of(stand, "lost-1")
    assert len(sent) >= 3
    assert all(without_header(p) == without_header(sent[0]) for p in sent), "the same order"
    # 2.1 section 6.4: the headerId is incremented by 1 with each message sent on a topic.
    ids = header_ids(stand.recorder.of("order"))
    assert ids == list(range(ids[0], ids[0] + len(ids))), ids
    stamps = [json.loads(p)["timestamp"] for p in sent]
    assert len(set(stamps)) == len(stamps), "each send stamped when sent"
    assert stand.side_effects("lost-1") == 1


def test_duplicated_and_late_reordered_orders_never_run_twice(
    stand: Vda5050Stand, agent: AgentUnderTest
) -> None:
    agent.send("dup-1", SLOW)
    running_order(stand, "dup-1")
    first = orders_of(stand, "dup-1")[0]
    order_topic = f"{stand.prefix}/order"
    for _ in range(3):  # duplicated while current: ignored by the vehicle
        stand.recorder.publish(order_topic, first)
    assert agent.final("dup-1").state == COMPLETED
    agent.send("dup-2", SHORT)
    running_order(stand, "dup-2")
    # The old order arrives late while another runs: refused (another order is active),
    # and that refusal is not taken for a refusal of the running one.
    stand.recorder.publish(order_topic, first)
    final = agent.final("dup-2")
    assert final.state == COMPLETED, final
    assert stand.side_effects("dup-1") == 1 and stand.side_effects("dup-2") == 1
    # The backend never sent dup-1 again once the vehicle had reported it.
    ours = [p for p in orders_of(stand, "dup-1") if p == first]
    assert len(ours) >= 4  # one (or a few, before state showed it) + the test's four


def test_broker_restart_mid_order_completes_once(
    stand: Vda5050Stand, agent: AgentUnderTest
) -> None:
    agent.send("broker-1", SLOW)
    running_order(stand, "broker-1")
    stand.broker.restart(kill=True)
    final = agent.final("broker-1", timeout_s=60)
    assert final.state == COMPLETED, final
    assert stand.side_effects("broker-1") == 1


def test_a_vehicle_that_restarts_and_forgets_the_order_leaves_it_interrupted(
    stand: Vda5050Stand, agent: AgentUnderTest
) -> None:
    agent.send("forgot-1", SLOW)
    running_order(stand, "forgot-1")
    stand.kill_vehicle()
    stand.start_vehicle()
    final = agent.final("forgot-1", timeout_s=60)
    assert final.state == INTERRUPTED, final
    published = len(orders_of(stand, "forgot-1"))
    agent.spin_for(1.0)
    assert len(orders_of(stand, "forgot-1")) == published, "never re-sent to the new vehicle"
    assert stand.side_effects("forgot-1") == 0
    agent.send("forgot-2", SHORT)
    assert agent.final("forgot-2").state == COMPLETED


def test_other_order_active_is_a_refusal_that_releases_the_key(
    stand: Vda5050Stand, agent: AgentUnderTest
) -> None:
    stand.faults(mute_state=True)
    state = stand.latest_state()
    assert state is not None
    foreign = dict(json.loads(orders_template(stand)))
    stand.recorder.publish(f"{stand.prefix}/order", json.dumps(foreign).encode())
    wait_until(
        lambda: stand.oracle.state()["poses"].get("vda_1", {"x": 0.0})["x"] > 1.0,
        "the vehicle to drive the other master's order",
    )
    agent.send("busy-1", SHORT)
    refused = agent.answer("busy-1", lambda r: r.state == REJECTED, "the refusal")
    assert refused.status_code == 429 and "OTHER_ORDER_ACTIVE" in refused.message, refused
    assert not agent.check_key("busy-1").found, "released"
    stand.faults(mute_state=False)
    stand.wait_state(lambda s: s["orderId"] == "foreign" and not s["nodeStates"], "idle again")
    agent.send("busy-1", SHORT, attempt=2)
    assert agent.final("busy-1").state == COMPLETED
    assert stand.side_effects("busy-1") == 1


def orders_template(stand: Vda5050Stand) -> str:
    """Another master control's order: a long drive from where the vehicle stands."""
    state = stand.latest_state()
    assert state is not None
    here = state["agvPosition"]
    return json.dumps(
        {
            "headerId": 0,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "version": "2.1.0",
            "manufacturer": MANUFACTURER,
            "serialNumber": stand.serial,
            "orderId": "foreign",
            "orderUpdateId": 0,
            "nodes": [
                {
                    "nodeId": "a",
                    "sequenceId": 0,
                    "released": True,
                    "nodePosition": {"x": here["x"], "y": here["y"], "mapId": "warehouse"},
                    "actions": [],
                },
                {
                    "nodeId": "b",
                    "sequenceId": 2,
                    "released": True,
                    "nodePosition": {"x": 30.0, "y": 0.5, "mapId": "warehouse"},
                    "actions": [],
                },
            ],
            "edges": [
                {
                    "edgeId": "a-b",
                    "sequenceId": 1,
                    "released": True,
                    "startNodeId": "a",
                    "endNodeId": "b",
                    "actions": [],
                }
            ],
        }
    )


def test_connection_broken_refuses_before_any_side_effect_until_online_again(
    stand: Vda5050Stand, agent: AgentUnderTest
) -> None:
    stand.kill_vehicle()
    wait_until(
        lambda: (
            json.loads(stand.recorder.of("connection")[-1])["connectionState"] == "CONNECTIONBROKEN"
        ),
        "the vehicle's last will",
    )
    agent.send("broken-1", SHORT)
    refused = agent.answer("broken-1", lambda r: r.state == REJECTED, "the refusal")
    assert refused.status_code == 503 and "ONLINE" in refused.message, refused
    assert not orders_of(stand, "broken-1") and not agent.check_key("broken-1").found
    assert not agent.latest_status().ready  # the orchestrator holds its commands back
    stand.start_vehicle()
    # Ready again once the vehicle is ONLINE and has sent a state since (which tells
    # whether it restarted): what an orchestrator waits for before re-sending.
    agent.wait(lambda: agent.latest_status().ready, "the agent to report ready again")
    agent.send("broken-1", SHORT, attempt=2)
    assert agent.final("broken-1").state == COMPLETED
    assert stand.side_effects("broken-1") == 1


def test_agent_crash_before_the_vehicle_took_the_order_is_reconciled_never_resent(
    stand: Vda5050Stand, agent: AgentUnderTest
) -> None:
    stand.faults(drop_orders=1000)  # every publish lost: claimed, never taken over
    agent.send("crash-1", SHORT)
    wait_until(lambda: len(orders_of(stand, "crash-1")) >= 2, "the agent re-sending")
    assert agent.signal(signal.SIGKILL) == -signal.SIGKILL
    clean_dds_shared_memory()
    stand.faults(drop_orders=0)
    published = len(orders_of(stand, "crash-1"))
    agent.start()
    final = agent.final_after_restart("crash-1")
    assert final.state == INTERRUPTED, final
    agent.spin_for(1.0)
    assert len(orders_of(stand, "crash-1")) == published, "never published after the restart"
    assert stand.side_effects("crash-1") == 0


def test_agent_crash_between_the_vehicles_finish_and_the_commit_is_reconciled_completed(
    stand: Vda5050Stand, agent: AgentUnderTest
) -> None:
    agent.send("finished-1", SLOW)
    running_order(stand, "finished-1")
    assert agent.process is not None
    # Frozen while the vehicle finishes: the FINISHED state reaches no store commit.
    agent.process.send_signal(signal.SIGSTOP)
    try:
        stand.wait_state(
            lambda s: s["orderId"] == "finished-1" and not s["nodeStates"] and not s["edgeStates"],
            "the vehicle to finish the order",
        )
        assert stand.side_effects("finished-1") == 1
        assert not [r for r in agent.answers("finished-1") if r.state == COMPLETED]
    finally:
        assert agent.signal(signal.SIGKILL) == -signal.SIGKILL
    clean_dds_shared_memory()
    published = len(orders_of(stand, "finished-1"))
    agent.start()
    # The result published as the restarted agent reconciles may precede the test's
    # match with its new publisher: ask the store, then re-send as an orchestrator would.
    stored = agent.wait(
        lambda: (k := agent.check_key("finished-1")).state in (COMPLETED, 4, INTERRUPTED) and k,
        "finished-1 reconciled in the store",
    )
    assert stored.state == COMPLETED, stored  # from the vehicle's state, not re-run
    assert json.loads(stored.result_json)["pose"]["x"] == pytest.approx(40.0, abs=0.5), stored
    agent.send("finished-1", SLOW, attempt=2)
    replayed = agent.answer("finished-1", lambda r: r.replayed, "the replayed result")
    assert replayed.state == COMPLETED and replayed.result_json == stored.result_json
    agent.spin_for(1.0)
    assert len(orders_of(stand, "finished-1")) == published, "never published after the restart"
    assert stand.side_effects("finished-1") == 1


def test_bad_broker_input_never_kills_the_agent(stand: Vda5050Stand, agent: AgentUnderTest) -> None:
    state_topic = f"{stand.prefix}/state"
    good = stand.latest_state()
    assert good is not None
    for payload in (
        b"not json",
        b"[" * 10_000 + b"]" * 10_000,
        b'{"x": "' + b"y" * 400_000 + b'"}',
        b'{"headerId": "wrong"}',
        json.dumps(good | {"serialNumber": "other", "headerId": 10**6}).encode(),
        json.dumps(good | {"headerId": 0, "orderId": "stale"}).encode(),
    ):
        stand.recorder.publish(state_topic, payload)
    agent.send("after-garbage", SHORT)
    assert agent.final("after-garbage").state == COMPLETED
    agent.assert_alive()
    # What the test itself sent on the state topic is not the vehicle's: keep it out of
    # the schema check.
    stand.recorder.messages[:] = [
        m for m in stand.recorder.messages if not m[1].endswith("/state") or _valid_json(m[2])
    ]


def _valid_json(payload: bytes) -> bool:
    try:
        message = json.loads(payload)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(message, dict)
        and message.get("serialNumber") == "F1"
        and (message.get("orderId") != "stale")
        and "batteryState" in message
    )
