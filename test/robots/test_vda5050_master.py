"""What the ``vda5050`` backend asks a vehicle for, and what it takes from its state, with
real processes (an agent, the package's simulated vehicle made to do no more than the spec
obliges it to, a real Mosquitto, the world simulator as the oracle):

- a vehicle need not publish its factsheet unasked: the backend sends ``factsheetRequest``
  and ``stateRequest`` (2.1 section 6.8.1, predefined instant actions) and is ready only with both;
- a ``cancelOrder`` at the vehicle (an operator, another tool) ends the command FAILED with
  the reason, never COMPLETED;
- headerIds go up by one per message on each topic (2.1 section 6.4), re-sends and agent
  restarts included;
- a 3.0 vehicle (topics ``v3``, CONNECTION_BROKEN, ``mobileRobotPosition``);
- a broker that kept no ``connection`` message (no retained messages) still lets the agent
  find its vehicle.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.bringup.processes import clean_dds_shared_memory
from fleet_idempotency.testing import BackendUnderTest, CommandSpec
from fleet_idempotency.testing.agent_under_test import AgentUnderTest, wait_until

from support.vda5050_stand import Vda5050Stand, make_stand, needs_mosquitto

pytestmark = needs_mosquitto

COMPLETED, FAILED, REJECTED = 3, 4, 6
SHORT = CommandSpec("move_to_waypoint", {"x": 3.0, "y": 0.5})
SLOW = CommandSpec("move_to_waypoint", {"x": 40.0, "y": 0.5})

Stand = Callable[..., Vda5050Stand]
Agent = Callable[..., AgentUnderTest]


@pytest.fixture
def stand_of(ros_env: dict[str, str], ros_context: Any, tmp_path: Path) -> Iterator[Stand]:
    closers: list[Callable[[], None]] = []
    stands: list[Vda5050Stand] = []

    def make(**kw: Any) -> Vda5050Stand:
        (tmp_path / "stand").mkdir()
        made, close = make_stand(
            tmp_path / "stand", ros_env, ros_context, robot_id="vda_1", serial="F1", **kw
        )
        closers.append(close)
        stands.append(made)
        return made

    try:
        yield make
        for made in stands:
            made.assert_every_message_matches_the_official_schemas()
    finally:
        for close in closers:
            close()


@pytest.fixture
def agent_of(ros_env: dict[str, str], ros_context: Any, tmp_path: Path) -> Iterator[Agent]:
    running: list[AgentUnderTest] = []

    def start(stand: Vda5050Stand, **params: Any) -> AgentUnderTest:
        subject = BackendUnderTest(
            backend="vda5050",
            robot_type="amr",
            params=stand.backend_params(**params),
            completes=SHORT,
            refused=CommandSpec("move_to_waypoint", {"waypoint": "NOWHERE"}),
            slow=SLOW,
            side_effects=stand.side_effects,
            robot_id="vda_1",
            reconciles_after_crash=True,
        )
        work = tmp_path / "agent"
        work.mkdir(exist_ok=True)
        agent = AgentUnderTest(subject, env=ros_env, work_dir=work, context=ros_context)
        running.append(agent)
        agent.start()
        return agent

    try:
        yield start
    finally:
        for agent in running:
            agent.close()
            print(f"----- agent -----\n{agent.log()[-4000:]}")


def sent_by_master(stand: Vda5050Stand, topic_name: str) -> list[dict[str, Any]]:
    return [json.loads(p) for p in stand.recorder.of(topic_name)]


def requested(stand: Vda5050Stand, action_type: str) -> list[dict[str, Any]]:
    return [
        message
        for message in sent_by_master(stand, "instantActions")
        if any(a["actionType"] == action_type for a in message["actions"])
    ]


def test_a_vehicle_that_never_publishes_its_factsheet_unasked_is_asked_and_takes_orders(
    stand_of: Stand, agent_of: Agent
) -> None:
    stand = stand_of()
    assert stand.recorder.of("factsheet") == [], "the stand's vehicle publishes none unasked"
    agent = agent_of(stand)  # waits until the agent says its backend is ready
    wait_until(lambda: requested(stand, "factsheetRequest"), "the backend's factsheetRequest")
    wait_until(lambda: stand.recorder.of("factsheet"), "the factsheet answering it")
    agent.send("fs-1", SHORT)
    assert agent.final("fs-1").state == COMPLETED
    assert stand.side_effects("fs-1") == 1


def test_an_agent_beside_an_idle_vehicle_asks_for_its_state_instead_of_waiting(
    stand_of: Stand, agent_of: Agent
) -> None:
    # The vehicle's own state comes every 10 minutes: readiness can only come from asking.
    stand = stand_of(state_period_s=600.0)
    states_before = len(stand.recorder.of("state"))
    agent = agent_of(stand)  # waits until the agent says its backend is ready
    wait_until(lambda: requested(stand, "stateRequest"), "the backend's stateRequest")
    wait_until(lambda: len(stand.recorder.of("state")) > states_before, "a state answering it")
    assert agent.latest_status().ready


def test_a_move_cancelled_at_the_vehicle_ends_failed_with_the_reason_never_completed(
    stand_of: Stand, agent_of: Agent
) -> None:
    stand = stand_of()
    agent = agent_of(stand)
    agent.send("cancel-1", SLOW)
    stand.wait_state(
        lambda s: s["orderId"] == "cancel-1" and bool(s["nodeStates"]),
        "the order running",
    )
    operator = {
        "headerId": 0,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "version": stand.protocol_version,
        "manufacturer": "fleet-idem",
        "serialNumber": stand.serial,
        "actions": [
            {"actionId": "operator-1", "actionType": "cancelOrder", "blockingType": "NONE"}
        ],
    }
    stand.recorder.publish(f"{stand.prefix}/instantActions", json.dumps(operator).encode())
    final = agent.final("cancel-1")
    assert final.state == FAILED, final
    assert "cancelled at the vehicle (cancelOrder 'operator-1')" in final.result_json, final
    assert stand.side_effects("cancel-1") == 0, "it never arrived"
    # The test's own instantActions message is not the backend's: keep it out of the check.
    stand.recorder.messages[:] = [m for m in stand.recorder.messages if b"operator-1" not in m[2]]


def consecutive(ids: list[int]) -> bool:
    return ids == list(range(ids[0], ids[0] + len(ids)))


def test_header_ids_go_up_by_one_across_resends_and_an_agent_restart(
    stand_of: Stand, agent_of: Agent
) -> None:
    stand = stand_of()
    agent = agent_of(stand)
    stand.faults(drop_orders=2)  # two re-sends
    agent.send("hdr-1", SHORT)
    assert agent.final("hdr-1").state == COMPLETED
    assert agent.signal(signal.SIGTERM) == 0
    restarted = agent_of(stand)
    restarted.send("hdr-2", SHORT)
    assert restarted.final("hdr-2").state == COMPLETED
    for topic_name in ("order", "instantActions"):
        ids = [m["headerId"] for m in sent_by_master(stand, topic_name)]
        assert len(ids) >= 2 and consecutive(ids), f"{topic_name}: {ids}"
    # A kill -9 may skip one id (written before it is sent), never repeat one.
    assert restarted.signal(signal.SIGKILL) == -signal.SIGKILL
    clean_dds_shared_memory()
    last = sent_by_master(stand, "order")[-1]["headerId"]
    after_crash = agent_of(stand)
    after_crash.send("hdr-3", SHORT)
    assert after_crash.final("hdr-3").state == COMPLETED
    assert sent_by_master(stand, "order")[-1]["headerId"] > last


def test_a_3_0_vehicle_is_commanded_on_v3_topics_and_its_last_will_is_heard(
    stand_of: Stand, agent_of: Agent
) -> None:
    stand = stand_of(protocol_version="3.0.0")
    assert stand.prefix.startswith("uagv/v3/")
    agent = agent_of(stand)
    agent.send("v3-1", SHORT)
    final = agent.final("v3-1")
    assert final.state == COMPLETED, final
    assert stand.side_effects("v3-1") == 1
    assert all(m["version"] == "3.0.0" for m in sent_by_master(stand, "order"))
    stand.kill_vehicle()
    wait_until(
        lambda: (
            json.loads(stand.recorder.of("connection")[-1])["connectionState"]
            == "CONNECTION_BROKEN"
        ),
        "the 3.0 last will",
    )
    agent.wait(lambda: not agent.latest_status().ready, "the agent to see its vehicle gone")
    stand.start_vehicle()
    agent.wait(lambda: agent.latest_status().ready, "the agent ready again")


def test_a_broker_that_kept_no_connection_message_still_lets_the_agent_find_its_vehicle(
    stand_of: Stand, agent_of: Agent
) -> None:
    stand = stand_of()
    # A zero-length retained publish deletes the retained message: as a broker that keeps
    # none (or lost them in a restart) would have it, the agent hears no ONLINE.
    stand.recorder.publish(f"{stand.prefix}/connection", b"", qos=1, retain=True)
    agent = agent_of(stand)
    agent.send("noretain-1", SHORT)
    assert agent.final("noretain-1").state == COMPLETED
    assert stand.side_effects("noretain-1") == 1


def test_an_order_the_vehicle_neither_takes_nor_refuses_is_refused_by_its_deadline(
    stand_of: Stand, agent_of: Agent
) -> None:
    """A vehicle that drops what it cannot read says nothing: the key must not stay claimed
    for ever. After ``accept_timeout_s`` the order is no longer sent, and once states
    published after the last copy still do not show it, nothing ran: refused, released."""
    stand = stand_of()
    agent = agent_of(stand, accept_timeout_s=2.0)
    stand.faults(drop_orders=1000)  # every order lost, silently
    agent.send("deaf-1", SHORT)
    refused = agent.answer(
        "deaf-1",
        lambda r: r.state == REJECTED,
        "the refusal",
    )
    assert refused.status_code == 504, refused
    assert "neither took nor refused" in refused.message, refused
    assert not agent.check_key("deaf-1").found, "released"
    sent = len([m for m in sent_by_master(stand, "order") if m["orderId"] == "deaf-1"])
    agent.spin_for(1.0)
    assert len([m for m in sent_by_master(stand, "order") if m["orderId"] == "deaf-1"]) == sent
    stand.faults(drop_orders=0)
    agent.send("deaf-1", SHORT, attempt=2)
    assert agent.final("deaf-1").state == COMPLETED
    assert stand.side_effects("deaf-1") == 1
