"""Canonical JSON and fingerprints: equal intent, equal fingerprint; anything else differs."""

from __future__ import annotations

import hashlib

import pytest

from fleet_idempotency.store import InvalidRequest, canonical_json, command_fingerprint


def test_canonical_json_sorts_keys_strips_whitespace_and_keeps_utf8() -> None:
    assert (
        canonical_json({"b": 1, "a": [1, {"d": 2, "c": "é"}]}) == '{"a":[1,{"c":"é","d":2}],"b":1}'
    )


def test_canonical_json_refuses_nan_and_infinity() -> None:
    for value in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="Out of range"):
            canonical_json({"x": value})


def test_fingerprint_is_sha256_of_canonical_robot_type_and_payload() -> None:
    expected = hashlib.sha256(
        b'{"command_type":"pick","payload":{"slot":"A1"},"robot_id":"fork-1"}'
    ).hexdigest()
    assert command_fingerprint("fork-1", "pick", '{ "slot" : "A1" }') == expected


def test_fingerprint_ignores_key_order_but_not_values_robot_or_type() -> None:
    base = command_fingerprint("r1", "move_to_waypoint", '{"x": 1, "y": 2}')
    assert command_fingerprint("r1", "move_to_waypoint", '{"y":2,"x":1}') == base
    assert command_fingerprint("r1", "move_to_waypoint", '{"x": 1, "y": 3}') != base
    assert command_fingerprint("r2", "move_to_waypoint", '{"x": 1, "y": 2}') != base
    assert command_fingerprint("r1", "dock", '{"x": 1, "y": 2}') != base


@pytest.mark.parametrize("payload", ["[]", "null", "nope", '{"a": NaN}', '{"a": -Infinity}'])
def test_fingerprint_of_a_non_object_payload_names_payload_json(payload: str) -> None:
    with pytest.raises(InvalidRequest) as error:
        command_fingerprint("r1", "pick", payload)
    assert error.value.field == "payload_json" and error.value.status_code == 400
