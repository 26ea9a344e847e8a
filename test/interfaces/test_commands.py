"""Command payloads are validated strictly: unknown fields and wrong types are a 400."""

from __future__ import annotations

import json

import pytest

from fleet_idempotency.commands import (
    Dock,
    InvalidCommand,
    MoveToWaypoint,
    Pick,
    check_capability,
    parse_json_object,
    parse_payload,
)
from fleet_idempotency.store.fingerprint import MAX_JSON_DEPTH


@pytest.mark.parametrize(
    ("command_type", "payload_json", "expected"),
    [
        ("move_to_waypoint", '{"waypoint": "W3"}', MoveToWaypoint(waypoint="W3")),
        ("move_to_waypoint", '{"x": 1.5, "y": 2}', MoveToWaypoint(x=1.5, y=2.0)),
        ("pick", '{"slot": "A1"}', Pick(slot="A1")),
        ("dock", '{"dock": "D1"}', Dock(dock="D1")),
    ],
)
def test_valid_payloads_parse(command_type: str, payload_json: str, expected: object) -> None:
    assert parse_payload(command_type, payload_json) == expected


@pytest.mark.parametrize(
    ("command_type", "payload_json", "field", "fragment"),
    [
        ("pick", '{"slot": "A1", "speed": 3}', "payload_json.speed", "Extra inputs"),
        ("pick", '{"slott": "A1"}', "payload_json", ""),
        ("pick", '{"slot": 7}', "payload_json.slot", "string"),
        ("pick", '{"slot": "A 1"}', "payload_json.slot", "pattern"),
        ("pick", "not json", "payload_json", "not valid JSON"),
        ("pick", '["A1"]', "payload_json", "must be a JSON object"),
        ("move_to_waypoint", '{"waypoint": "W1", "x": 1, "y": 2}', "payload_json", "not both"),
        ("move_to_waypoint", '{"x": 1}', "payload_json", "both 'x' and 'y'"),
        ("move_to_waypoint", '{"x": true, "y": 2}', "payload_json.x", "valid number"),
        ("teleport", '{"slot": "A1"}', "command_type", "unknown command type"),
    ],
)
def test_invalid_payloads_name_the_problem(
    command_type: str, payload_json: str, field: str, fragment: str
) -> None:
    with pytest.raises(InvalidCommand) as error:
        parse_payload(command_type, payload_json)
    assert error.value.field.startswith(field)
    assert fragment in str(error.value)
    assert error.value.status_code == 400


def test_non_finite_coordinates_are_rejected() -> None:
    with pytest.raises(InvalidCommand, match="finite"):
        parse_payload("move_to_waypoint", '{"x": Infinity, "y": 0}')


def test_parse_json_object_rejects_non_objects() -> None:
    assert parse_json_object('{"a": 1}') == {"a": 1}
    with pytest.raises(InvalidCommand, match="got list"):
        parse_json_object("[1]")


@pytest.mark.parametrize(
    ("robot_type", "command_type", "allowed"),
    [
        ("forklift", "pick", True),
        ("forklift", "dock", True),
        ("amr", "move_to_waypoint", True),
        ("amr", "pick", False),
        ("arm", "place", True),
        ("arm", "move_to_waypoint", False),
        ("arm", "dock", False),
    ],
)
def test_capabilities_per_robot_type(robot_type: str, command_type: str, allowed: bool) -> None:
    if allowed:
        check_capability(robot_type, command_type)
    else:
        with pytest.raises(InvalidCommand, match=f"a {robot_type} cannot {command_type}"):
            check_capability(robot_type, command_type)


def test_unknown_robot_type_is_refused() -> None:
    with pytest.raises(InvalidCommand, match="unknown robot type"):
        check_capability("submarine", "pick")


def test_deep_nesting_is_refused_before_decoding_with_the_limit_named() -> None:
    # 5,000 levels in 10 kB: json.loads would raise RecursionError; this must be a 400.
    with pytest.raises(InvalidCommand, match=f"at most {MAX_JSON_DEPTH} levels") as error:
        parse_payload("pick", "[" * 5000 + "]" * 5000)
    assert error.value.field == "payload_json"


def test_nesting_up_to_the_limit_decodes_and_one_more_level_does_not() -> None:
    at_limit = '{"a":' * (MAX_JSON_DEPTH - 1) + "[1]" + "}" * (MAX_JSON_DEPTH - 1)
    assert parse_json_object(at_limit)["a"]
    with pytest.raises(InvalidCommand, match="nested 17 levels"):
        parse_json_object("[" + at_limit + "]")


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"slot": "[" * 100 + "{" * 100})
    assert parse_json_object(text)["slot"].startswith("[[[")
