"""The HTTP mapping of fleet answers and the API-key rules, as plain Python (no fleet).

507 (store full) is pinned here: filling a real orchestrator store takes gigabytes of
keys, which this machine's tests cannot afford. Every other code is pinned against a
real fleet in test_http_submit.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet_idempotency.http.answers import http_field, submit_answer
from fleet_idempotency.http.auth import (
    LOCAL_CLIENT,
    ApiKeyError,
    load_api_keys,
    parse_env_keys,
)
from fleet_idempotency.http.gateway import SubmitReply
from fleet_idempotency.http.problems import Problem

KEY = "0123456789abcdef0123"


def answer(state: int, code: int, replayed: bool = False, result: str = "") -> SubmitReply:
    return SubmitReply(state, code, replayed, result, "orchestrator says so")


@pytest.mark.parametrize(
    ("code", "slug"), [(507, "store-full"), (503, "store-unavailable")], ids=["full", "unavailable"]
)
def test_a_store_that_cannot_take_the_key_is_a_problem_with_retry_after(
    code: int, slug: str
) -> None:
    with pytest.raises(Problem) as raised:
        submit_answer(
            answer(6, code),
            key="k",
            robot_id="amr_1",
            command_type="dock",
            fingerprint="f",
            retry_after_s=2,
        )
    problem = raised.value
    assert problem.status == code and problem.slug == slug
    assert problem.headers == {"Retry-After": "2"}
    assert json.loads(problem.body())["type"] == f"/problems/{slug}"


def test_a_wait_on_a_key_withdrawn_by_an_action_cancel_is_a_409_problem() -> None:
    with pytest.raises(Problem) as raised:
        submit_answer(
            answer(6, 499),
            key="k",
            robot_id="amr_1",
            command_type="dock",
            fingerprint="f",
            retry_after_s=2,
        )
    assert (raised.value.status, raised.value.slug) == (409, "command-withdrawn")


def test_final_bodies_ignore_the_per_call_message() -> None:
    fields = {
        "key": "k",
        "robot_id": "amr_1",
        "command_type": "dock",
        "fingerprint": "f",
        "retry_after_s": 1,
    }
    fresh = submit_answer(answer(3, 200, result='{"dock": "D1"}'), **fields)
    replay = submit_answer(SubmitReply(3, 200, True, '{"dock": "D1"}', "another message"), **fields)
    assert fresh.body == replay.body
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in fresh.headers


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ("payload_json.slot: Field required", "payload.slot"),
        ("key: must not be empty", "Idempotency-Key"),
        ("robot_id: unknown robot 'x'", "robot_id"),
        ("unknown waypoint 'W99'", None),
    ],
)
def test_orchestrator_fields_get_their_http_names(message: str, field: str | None) -> None:
    assert http_field(message) == field


def test_api_keys_from_file_and_environment(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(f"api_keys:\n  - {{client_id: ops, key: {KEY}, operator: true}}\n")
    keys = load_api_keys(keys_file, {"FLEET_IDEM_API_KEYS": f"wms={KEY}x"})
    assert keys.clients() == ["ops", "wms"]
    ops = keys.caller_for(f"Bearer {KEY}")
    assert ops is not None and ops.operator and ops.client_id == "ops"
    wms = keys.caller_for(f"bearer {KEY}x")
    assert wms is not None and not wms.operator
    assert wms.owns_robot_key("wms:k-1") and not wms.owns_robot_key("ops:k-1")
    assert keys.caller_for(None) is None
    assert keys.caller_for(f"Basic {KEY}") is None


def test_no_keys_means_the_local_operator() -> None:
    caller = load_api_keys(None, {}).caller_for(None)
    assert caller is not None and caller.client_id == LOCAL_CLIENT and caller.operator


@pytest.mark.parametrize("value", ["wms", f"bad id={KEY}", "wms=short", f"wms={KEY},mes={KEY}"])
def test_bad_key_configuration_is_refused_with_a_reason(value: str) -> None:
    with pytest.raises(ApiKeyError) as raised:
        load_api_keys(None, {"FLEET_IDEM_API_KEYS": value})
    assert KEY not in str(raised.value), "a key is never echoed"


def test_env_entries_are_split_on_the_first_equals_sign() -> None:
    (entry,) = parse_env_keys(f"wms={KEY}=tail")
    assert entry.client_id == "wms" and entry.key == f"{KEY}=tail"


def test_the_demo_http_client_reads_answers_as_submit_responses() -> None:
    from fleet_idempotency.bringup.http_client import reply_from_http

    final = reply_from_http(
        200, {"idempotent-replayed": "true"}, b'{"state":"completed","result":{"b":1,"a":2}}'
    )
    assert (final.state, final.status_code, final.replayed) == (3, 200, True)
    assert final.result_json == '{"a": 2, "b": 1}'  # as the robot's store encodes it
    failed = reply_from_http(500, {}, b'{"command":{"state":"failed","result":{"error":"x"}}}')
    assert (failed.state, failed.result_json) == (4, '{"error": "x"}')
    refused = reply_from_http(422, {}, b'{"detail":"reused","status":422}')
    assert (refused.state, refused.message, refused.result_json) == (6, "reused", "")
