"""The VDA 5050 rules the backend relies on, pinned without processes: what ``state``
says of an order (verdict), bad broker input counted and ignored (vehicle view), and an
order that is byte-identical on every re-send and matches the official schema."""

from __future__ import annotations

import json
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
from fleet_idempotency.vda5050.wire import BadMessage, decode, json_depth_exceeds

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


PICK = plan_for(command("pick", {"slot": "A1"}), None)
NODE = {"nodeId": "A1", "sequenceId": 2, "released": True}


def ref(key: str, value: str) -> list[dict[str, str]]:
    return [{"referenceKey": key, "referenceValue": value}]


def pick_is(status: str) -> list[dict[str, str]]:
    return [{"actionId": "k-1/pick", "actionStatus": status}]


@pytest.mark.parametrize(
    ("fields", "phase"),
    [
        # 2.1 6.10.1: nodeStates/edgeStates list what is still to do.
        ({"orderId": "k-1", "nodeStates": [NODE]}, Phase.RUNNING),
        (
            {
                "orderId": "k-1",
                "actionStates": [{"actionId": "k-1/pick", "actionStatus": "FINISHED"}],
            },
            Phase.COMPLETED,
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


def test_ids_come_from_the_key_and_a_resend_is_the_same_bytes() -> None:
    plan = plan_for(command("place", {"slot": "B2"}, key="0190a1b2-key"), None)
    assert plan.order_id == "0190a1b2-key" and plan.action_ids == ("0190a1b2-key/drop",)
    message = build_order(
        plan,
        Target("B2", 3.0, 4.0),
        here=Pose(x=1.0, y=1.0),
        header_id=7,
        header=Header("2.1.0", MAKER, SERIAL),
        map_id="warehouse",
        deviation_xy=0.5,
    )
    order = json.loads(message)
    assert order["orderUpdateId"] == 0
    assert [n["nodeId"] for n in order["nodes"]] == ["here", "B2"]
    assert order["nodes"][1]["actions"][0]["actionType"] == "drop"
    from support.vda5050_stand import SchemaCheck

    assert SchemaCheck().errors("order", order) == []


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
