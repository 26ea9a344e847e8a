"""The VDA 5050 rules the backend relies on, pinned without processes: what ``state``
says of an order (verdict), bad broker input counted and ignored (vehicle view), an order
whose re-sends differ only in headerId and timestamp and that matches the official schema,
and headerIds that keep increasing across restarts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.commands import parse_payload
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.backend import Command
from fleet_idempotency.robots.targets import Target
from fleet_idempotency.robots.vda5050.orders import Header, build_order, plan_for
from fleet_idempotency.robots.vda5050.vehicle_view import VehicleView
from fleet_idempotency.robots.vda5050.verdict import Phase, judge
from fleet_idempotency.vda5050.messages import State
from fleet_idempotency.vda5050.wire import BadMessage, HeaderIds, decode, json_depth_exceeds

SERIAL, MAKER = "S1", "acme"


def command(kind: str, payload: dict[str, Any], key: str = "k-1") -> Command:
    return Command("r1", key, kind, parse_payload(kind, json.dumps(payload)))


def state(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "headerId": 1,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "version": "2.1.0",
        "manufacturer": MAKER,
        "serialNumber": SERIAL,
        "orderId": "",
        "orderUpdateId": 0,
        "lastNodeId": "",
        "lastNodeSequenceId": 0,
        "nodeStates": [],
        "edgeStates": [],
        "driving": False,
        "actionStates": [],
        "batteryState": {"batteryCharge": 50.0, "charging": False},
        "operatingMode": "AUTOMATIC",
        "errors": [],
        "safetyState": {"eStop": "NONE", "fieldViolation": False},
    }
    return base | fields


PICK = plan_for(command("pick", {"slot": "A1"}), None, Target("A1", 4.0, 2.0), 0.5)
NODE = {"nodeId": "A1", "sequenceId": 2, "released": True}
AT_A1 = {"x": 4.1, "y": 2.0, "theta": 0.0, "mapId": "warehouse", "positionInitialized": True}
PICKED = [{"actionId": "k-1/pick", "actionStatus": "FINISHED"}]
CANCEL_DONE = {"actionId": "op-7", "actionType": "cancelOrder", "actionStatus": "FINISHED"}


def ref(key: str, value: str) -> list[dict[str, str]]:
    return [{"referenceKey": key, "referenceValue": value}]


def pick_is(status: str) -> list[dict[str, str]]:
    return [{"actionId": "k-1/pick", "actionStatus": status}]


@pytest.mark.parametrize(
    ("fields", "phase"),
    [
        # 2.1 6.10.1: nodeStates/edgeStates list what is still to do.
        ({"orderId": "k-1", "nodeStates": [NODE]}, Phase.RUNNING),
        # At the target node, within its deviation, the pick finished: done.
        ({"orderId": "k-1", "lastNodeId": "A1", "actionStates": PICKED}, Phase.COMPLETED),
        (
            {"orderId": "k-1", "lastNodeId": "A1", "actionStates": PICKED, "agvPosition": AT_A1},
            Phase.COMPLETED,
        ),
        # Nothing left, but it never reached the target (a cancelOrder empties the node
        # states and keeps lastNodeId where the vehicle stopped, 2.1 6.6.3): never done.
        ({"orderId": "k-1", "lastNodeId": "here", "actionStates": PICKED}, Phase.FAILED),
        (
            {"orderId": "k-1", "lastNodeId": "here", "actionStates": [*PICKED, CANCEL_DONE]},
            Phase.FAILED,
        ),
        # At the target node by name, but its position says elsewhere.
        (
            {
                "orderId": "k-1",
                "lastNodeId": "A1",
                "actionStates": PICKED,
                "agvPosition": AT_A1 | {"x": 9.0},
            },
            Phase.FAILED,
        ),
        # Nodes done but the pick still running: not complete.
        (
            {
                "orderId": "k-1",
                "actionStates": [{"actionId": "k-1/pick", "actionStatus": "RUNNING"}],
            },
            Phase.RUNNING,
        ),
        # 2.1 6.11: an action FAILED fails the order.
        (
            {
                "orderId": "k-1",
                "actionStates": [{"actionId": "k-1/pick", "actionStatus": "FAILED"}],
            },
            Phase.FAILED,
        ),
        # 2.1 6.10.5: a FATAL error needs human intervention: the order will not finish.
        (
            {
                "orderId": "k-1",
                "nodeStates": [NODE],
                "errors": [{"errorType": "laserError", "errorLevel": "FATAL"}],
            },
            Phase.FAILED,
        ),
        # A WARNING that is not about the order does not fail it.
        (
            {
                "orderId": "k-1",
                "nodeStates": [NODE],
                "errors": [{"errorType": "batteryLow", "errorLevel": "WARNING"}],
            },
            Phase.RUNNING,
        ),
        # 2.1 6.6.4: refusals keep the previous order and reference ours.
        *[
            (
                {
                    "orderId": "previous",
                    "errors": [
                        {
                            "errorType": kind,
                            "errorLevel": "WARNING",
                            "errorReferences": [
                                {"referenceKey": "orderId", "referenceValue": "k-1"}
                            ],
                        }
                    ],
                },
                Phase.REFUSED,
            )
            for kind in ("validationError", "orderError", "orderUpdateError", "OTHER_ORDER_ACTIVE")
        ],
        # Someone else's refusal is not ours.
        (
            {
                "orderId": "previous",
                "errors": [
                    {
                        "errorType": "orderError",
                        "errorLevel": "WARNING",
                        "errorReferences": [{"referenceKey": "orderId", "referenceValue": "k-2"}],
                    }
                ],
            },
            Phase.NOT_CURRENT,
        ),
        ({"orderId": "previous"}, Phase.NOT_CURRENT),
    ],
)
def test_the_verdict_of_state_on_an_order(fields: dict[str, Any], phase: Phase) -> None:
    assert judge(State.model_validate(state(**fields)), PICK).phase is phase


def test_a_failed_action_reports_the_vehicles_error_text() -> None:
    verdict = judge(
        State.model_validate(
            state(
                orderId="k-1",
                actionStates=[{"actionId": "k-1/pick", "actionStatus": "FAILED"}],
                errors=[
                    {
                        "errorType": "actionError",
                        "errorLevel": "WARNING",
                        "errorDescription": "slot 'A1' is empty",
                        "errorReferences": [
                            {"referenceKey": "actionId", "referenceValue": "k-1/pick"}
                        ],
                    }
                ],
            )
        ),
        PICK,
    )
    assert verdict.phase is Phase.FAILED and "slot 'A1' is empty" in verdict.message


def test_a_cancel_at_the_vehicle_is_said_in_the_verdict() -> None:
    cancelled = State.model_validate(
        state(orderId="k-1", lastNodeId="here", actionStates=[*PICKED, CANCEL_DONE])
    )
    verdict = judge(cancelled, PICK)
    assert verdict.phase is Phase.FAILED
    assert "ended at node 'here', not at its target 'A1'" in verdict.message
    assert "cancelled at the vehicle (cancelOrder 'op-7')" in verdict.message
    dropped = judge(State.model_validate(state(orderId="k-1", actionStates=PICKED)), PICK)
    assert "dropped the rest of the order" in dropped.message


def test_a_3_0_state_is_read_as_well() -> None:
    """3.0: ``mobileRobotPosition``, ``actionResult``, instant actions apart."""
    v3 = state(
        version="3.0.0",
        orderId="k-1",
        lastNodeId="here",
        actionStates=[{"actionId": "k-1/pick", "actionStatus": "FAILED", "actionResult": "jam"}],
        instantActionStates=[CANCEL_DONE],
        mobileRobotPosition={"x": 1.0, "y": 2.0, "theta": 0.0, "mapId": "m", "localized": True},
    )
    parsed = State.model_validate(v3)
    assert parsed.position() is not None and parsed.position().x == 1.0  # type: ignore[union-attr]
    assert parsed.action("op-7") is not None
    verdict = judge(parsed, PICK)
    assert verdict.phase is Phase.FAILED and "jam" in verdict.message


def order_of(plan: Any, header_id: int, version: str = "2.1.0") -> dict[str, Any]:
    message: dict[str, Any] = json.loads(
        build_order(
            plan,
            Target("B2", 3.0, 4.0),
            here=Pose(x=1.0, y=1.0),
            header_id=header_id,
            header=Header(version, MAKER, SERIAL),
            map_id="warehouse",
        )
    )
    return message


def test_ids_come_from_the_key_and_a_resend_differs_only_in_its_header() -> None:
    plan = plan_for(command("place", {"slot": "B2"}, key="wms:0190a1b2"), None)
    assert plan.order_id == "wms:0190a1b2" and plan.action_ids == ("wms:0190a1b2/drop",)
    first, again = order_of(plan, 7), order_of(plan, 8)
    assert (first["headerId"], again["headerId"]) == (7, 8)
    assert {k: v for k, v in first.items() if k not in ("headerId", "timestamp")} == {
        k: v for k, v in again.items() if k not in ("headerId", "timestamp")
    }
    assert first["orderUpdateId"] == 0
    assert [n["nodeId"] for n in first["nodes"]] == ["here", "B2"]
    assert first["nodes"][1]["actions"][0]["actionType"] == "drop"
    assert first["edges"][0]["startNodeId"] == "here"
    from support.vda5050_stand import SchemaCheck

    assert SchemaCheck().errors("order", first) == []


def test_a_3_0_order_has_3_0_s_layout() -> None:
    """3.0 (section 6.6): the allowed deviation is an ellipse, and edges are connected to
    their nodes by sequence ids alone (no startNodeId/endNodeId)."""
    plan = plan_for(command("place", {"slot": "B2"}), None, deviation_xy=0.3)
    order = order_of(plan, 0, "3.0.0")
    assert order["version"] == "3.0.0"
    assert order["nodes"][0]["nodePosition"]["allowedDeviationXY"] == {
        "a": 0.3,
        "b": 0.3,
        "theta": 0.0,
    }
    assert "startNodeId" not in order["edges"][0] and "endNodeId" not in order["edges"][0]


def test_header_ids_keep_increasing_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "backend" / "header_ids.json"
    first = HeaderIds(path)
    sent = [first.next("order") for _ in range(3)] + [first.next("instantActions")]
    assert sent == [0, 1, 2, 0]
    restarted = HeaderIds(path)  # as after a kill -9: nothing said at exit
    assert (restarted.next("order"), restarted.next("instantActions")) == (3, 1)
    assert HeaderIds().next("order") == 0  # without a file: from 0, as a vehicle counts
    path.write_text("not json")
    with pytest.raises(ValueError, match="unreadable headerId file"):
        HeaderIds(path)


def view() -> VehicleView:
    return VehicleView(manufacturer=MAKER, serial_number=SERIAL, max_bytes=4096, max_depth=8)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json at all", "not_json"),
        (b"[" * 50 + b"]" * 50, "too_deep"),
        (b'{"a": "' + b"x" * 5000 + b'"}', "too_big"),
        (b"[1, 2]", "not_object"),
        (json.dumps({"headerId": "one"}).encode(), "wrong_schema"),
        (json.dumps(state(serialNumber="S2")).encode(), "other_vehicle"),
        (json.dumps(state(manufacturer="other")).encode(), "other_vehicle"),
        (b"\xff\xfe", "not_json"),
    ],
)
def test_bad_input_is_counted_and_ignored(payload: bytes, reason: str) -> None:
    seen = view()
    assert seen.receive("state", payload) is False
    assert seen.bad_input[reason] == 1
    assert seen.snapshot().state is None


def test_a_stale_header_is_ignored_unless_the_vehicle_came_online_again() -> None:
    seen = view()
    assert seen.receive("state", json.dumps(state(headerId=5, orderId="a")).encode())
    assert not seen.receive("state", json.dumps(state(headerId=5, orderId="b")).encode())
    assert not seen.receive("state", json.dumps(state(headerId=3, orderId="b")).encode())
    assert seen.bad_input["stale_header"] == 2 and seen.snapshot().state.orderId == "a"  # type: ignore[union-attr]
    online = {key: value for key, value in state().items() if key in ("timestamp", "version")}
    online |= {"headerId": 9, "manufacturer": MAKER, "serialNumber": SERIAL}
    assert seen.receive("connection", json.dumps(online | {"connectionState": "ONLINE"}).encode())
    # A restarted vehicle counts its headers from 0 again: accepted, and a restart counted.
    assert seen.receive("state", json.dumps(state(headerId=0, orderId="")).encode())
    assert seen.snapshot().restarts == 1


def test_depth_is_measured_outside_strings() -> None:
    assert not json_depth_exceeds(b'{"a": "[[[[[[[[[[[[[[[[[[[["}', 2)
    assert json_depth_exceeds(b'{"a": [[[1]]]}', 3)
    with pytest.raises(BadMessage):
        decode(b'"just a string"')
