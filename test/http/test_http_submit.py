"""The HTTP submit endpoint against a real uvicorn, a real httpx client and a real fleet.

Each status code of POST /v1/robots/{robot}/commands and GET /v1/commands/{key} is pinned
here (see the README's closing note for the table).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Any

import httpx
import pytest

from fleet_idempotency.orchestrator.core import robot_key

from support.fleet_harness import FleetHarness
from support.http_harness import (
    MES_KEY,
    OPS_KEY,
    HttpServer,
    post_command,
    wait_until_state,
)

PROBLEM = "application/problem+json"


def effects(fleet: FleetHarness, client: str, key: str, robot: str) -> int:
    return fleet.side_effects(robot, robot_key(client, key))


def assert_problem(answer: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    problem: dict[str, Any] = answer.json()
    assert problem["type"] == f"/problems/{slug}"
    assert problem["status"] == status
    assert problem["title"] and problem["detail"]
    return problem


def test_final_within_the_wait_is_200_and_its_replay_is_byte_identical(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("forklift_1", "forklift", start_x=2.0, start_y=4.0)
    fleet.start_orchestrator()
    http_server.start()
    with http_server.client() as client:
        first = post_command(client, "forklift_1", "pick-1", "pick", {"slot": "A3"}, wait_s=30)
        assert first.status_code == 200, first.text
        assert first.headers["content-type"] == "application/json"
        assert first.headers["location"] == "/v1/commands/pick-1"
        assert "idempotent-replayed" not in first.headers
        body = first.json()
        assert body["state"] == "completed" and body["result"]["item"] == "P-3"

        replays = [
            post_command(client, "forklift_1", "pick-1", "pick", {"slot": "A3"}, wait_s=wait)
            for wait in (0, 30)
        ]
        for replay in replays:
            assert replay.status_code == 200
            assert replay.headers["idempotent-replayed"] == "true"
            assert replay.content == first.content  # byte for byte
            for header in ("content-type", "location", "content-length"):
                assert replay.headers[header] == first.headers[header]
    assert effects(fleet, "wms", "pick-1", "forklift_1") == 1


def test_new_key_202_with_location_then_status_check_and_key_order_free_replay(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("amr_1", "amr", time_scale=0.05)
    fleet.start_orchestrator()
    http_server.start()
    with http_server.client() as client:
        key, quoted = "move/1?x#y", "move%2F1%3Fx%23y"  # any printable ASCII is a key
        accepted = post_command(client, "amr_1", key, "move_to_waypoint", {"x": 4, "y": 2})
        assert accepted.status_code == 202, accepted.text
        assert accepted.headers["location"] == f"/v1/commands/{quoted}"
        assert accepted.json()["state"] == "accepted" and accepted.json()["result"] is None
        status = wait_until_state(client, quoted, ("completed",))
        assert status["idempotency_key"] == key
        assert status["robot_id"] == "amr_1" and status["command_type"] == "move_to_waypoint"
        assert status["fingerprint"] == accepted.json()["fingerprint"]
        assert status["created_at"].endswith("Z") and status["expires_at"] > status["created_at"]
        # Same command, payload keys in another order: the canonical fingerprint agrees.
        again = post_command(client, "amr_1", key, "move_to_waypoint", {"y": 2, "x": 4})
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"

        unknown = client.get("/v1/commands/never-sent")
        assert_problem(unknown, 404, "unknown-key")
    assert effects(fleet, "wms", "move/1?x#y", "amr_1") == 1


def test_repeat_in_progress_409_and_reuse_for_another_command_422(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("forklift_1", "forklift", start_x=2.0, start_y=4.0, time_scale=0.3)
    fleet.start_orchestrator()
    http_server.start()
    with http_server.client() as client:
        assert post_command(client, "forklift_1", "k-1", "pick", {"slot": "A1"}).status_code == 202
        busy = post_command(client, "forklift_1", "k-1", "pick", {"slot": "A1"})
        problem = assert_problem(busy, 409, "in-progress")
        assert busy.headers["retry-after"] == "1"
        assert busy.headers["location"] == "/v1/commands/k-1"

        reused = post_command(client, "forklift_1", "k-1", "pick", {"slot": "A2"})
        problem = assert_problem(reused, 422, "key-reused")
        first_fingerprint = client.get("/v1/commands/k-1").json()["fingerprint"]
        assert problem["stored_fingerprint"] == first_fingerprint
        assert problem["received_fingerprint"] not in ("", None, first_fingerprint)
        assert first_fingerprint in problem["detail"]
        assert problem["received_fingerprint"] in problem["detail"]

        final = post_command(client, "forklift_1", "k-1", "pick", {"slot": "A1"}, wait_s=40)
        assert final.status_code == 200 and final.json()["result"]["item"] == "P-1"
    assert effects(fleet, "wms", "k-1", "forklift_1") == 1
    assert fleet.world_state()["slots"]["A2"] == "P-2", "the reused key never ran"


def test_bad_requests_are_problems_naming_the_field_and_store_nothing(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("amr_1", "amr")
    fleet.start_orchestrator()
    http_server.start(max_body_bytes=8192)
    url = "/v1/robots/amr_1/commands"
    good = {"command_type": "dock", "payload": {"dock": "D1"}}
    with http_server.client() as client:
        cases: list[tuple[str, httpx.Response, int, str, str | None]] = [
            (
                "no-key",
                client.post(url, json=good),
                400,
                "missing-idempotency-key",
                "Idempotency-Key",
            ),
            (
                "spaced key",
                client.post(url, json=good, headers={"Idempotency-Key": "a b"}),
                400,
                "invalid-request",
                "Idempotency-Key",
            ),
            (
                "long",
                client.post(url, json=good, headers={"Idempotency-Key": "k" * 129}),
                400,
                "invalid-request",
                "Idempotency-Key",
            ),
            (
                "bad-json",
                client.post(
                    url,
                    content=b'{"command_type": "dock",',
                    headers={"Idempotency-Key": "bad-json", "Content-Type": "application/json"},
                ),
                400,
                "invalid-request",
                "body",
            ),
            (
                # Under the size limit, but deep enough to make an unbounded decoder
                # raise RecursionError.
                "deep",
                client.post(
                    url,
                    content=b'{"command_type": "dock", "payload": '
                    + b"[" * 3000
                    + b"]" * 3000
                    + b"}",
                    headers={"Idempotency-Key": "deep", "Content-Type": "application/json"},
                ),
                400,
                "invalid-request",
                "body",
            ),
            (
                "nan",
                client.post(
                    url,
                    content=b'{"command_type": "dock", "payload": {"dock": NaN}}',
                    headers={"Idempotency-Key": "nan", "Content-Type": "application/json"},
                ),
                400,
                "invalid-request",
                "body",
            ),
            (
                "form",
                client.post(
                    url, data={"command_type": "dock"}, headers={"Idempotency-Key": "form"}
                ),
                415,
                "unsupported-media-type",
                "Content-Type",
            ),
            (
                "huge",
                client.post(
                    url,
                    json={**good, "payload": {"dock": "D" * 9000}},
                    headers={"Idempotency-Key": "huge"},
                ),
                413,
                "payload-too-large",
                "body",
            ),
            (
                "unknown-robot",
                post_command(client, "amr_99", "unknown-robot", "dock", {"dock": "D1"}),
                404,
                "unknown-robot",
                "robot_id",
            ),
            (
                "unknown-field",
                client.post(
                    url, json={**good, "priority": 1}, headers={"Idempotency-Key": "unknown-field"}
                ),
                400,
                "invalid-request",
                "priority",
            ),
            (
                "payload-field",
                post_command(client, "amr_1", "payload-field", "dock", {"dock": "D1", "speed": 2}),
                400,
                "invalid-request",
                "payload.speed",
            ),
            (
                "command-type",
                post_command(client, "amr_1", "command-type", "pick", {"slot": "A1"}),
                400,
                "invalid-request",
                "command_type",
            ),
            (
                "wait",
                post_command(client, "amr_1", "wait", "dock", {"dock": "D1"}, wait_s=-1),
                400,
                "invalid-request",
                "wait_timeout_sec",
            ),
        ]
        for name, answer, status, slug, field in cases:
            problem = assert_problem(answer, status, slug)
            assert problem.get("field") == field, (name, problem)
            if name == "deep":
                assert "nested 3001 levels deep; at most 17" in problem["detail"], problem
        quoted = post_command(client, "amr_1", '"quoted-key"', "dock", {"dock": "D1"}, wait_s=20)
        assert quoted.status_code == 200, quoted.text
        assert quoted.headers["location"] == "/v1/commands/quoted-key"

        for key in (
            "bad-json",
            "deep",
            "nan",
            "form",
            "huge",
            "unknown-robot",
            "unknown-field",
            "payload-field",
            "command-type",
            "wait",
        ):
            assert_problem(client.get(f"/v1/commands/{key}"), 404, "unknown-key")
        assert_problem(client.get(f"/v1/commands/{'k' * 129}"), 400, "invalid-request")
    state = fleet.world_state()
    assert set(state["side_effects"].get("amr_1", {})) == {robot_key("wms", "quoted-key")}


def test_failed_after_start_is_a_final_500_replayed_and_a_robot_refusal_is_400(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("forklift_1", "forklift", start_x=2.0, start_y=4.0)
    fleet.start_orchestrator()
    http_server.start()
    with http_server.client() as client:
        empty = post_command(client, "forklift_1", "empty", "pick", {"slot": "B1"}, wait_s=30)
        problem = assert_problem(empty, 500, "command-failed")
        assert problem["command"]["state"] == "failed"
        again = post_command(client, "forklift_1", "empty", "pick", {"slot": "B1"})
        assert again.status_code == 500 and again.headers["idempotent-replayed"] == "true"
        assert again.content == empty.content

        nowhere = {"waypoint": "W99"}
        refused = post_command(client, "forklift_1", "nowhere", "move_to_waypoint", nowhere, 30)
        assert_problem(refused, 400, "command-refused")
        # Refused before any side effect: the key was released, a fixed retry may run.
        fixed = post_command(client, "forklift_1", "nowhere", "move_to_waypoint", nowhere, 30)
        assert fixed.status_code == 400 and "idempotent-replayed" not in fixed.headers
    assert effects(fleet, "wms", "nowhere", "forklift_1") == 0


def test_expired_key_is_410_pointing_to_the_status_endpoint(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("amr_1", "amr")
    fleet.start_orchestrator(retention_s=1.0, gc_period_s=0.3)
    http_server.start()
    with http_server.client() as client:
        done = post_command(client, "amr_1", "old", "dock", {"dock": "D2"}, wait_s=20)
        assert done.status_code == 200, done.text
        tombstone = wait_until_state(client, "old", ("expired",), timeout_s=30)
        assert tombstone["fingerprint"] == done.json()["fingerprint"]
        gone = post_command(client, "amr_1", "old", "dock", {"dock": "D2"})
        problem = assert_problem(gone, 410, "key-expired")
        assert gone.headers["location"] == "/v1/commands/old"
        assert problem["status_url"] == "/v1/commands/old"
    assert effects(fleet, "wms", "old", "amr_1") == 1


def test_full_robot_queue_is_429_with_retry_after(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    # amr_3 has no agent: it never comes online, so its queue never drains.
    fleet.start_orchestrator(queue_capacity_per_robot=1)
    http_server.start()
    with http_server.client() as client:
        assert post_command(client, "amr_3", "q-1", "dock", {"dock": "D3"}).status_code == 202
        full = post_command(client, "amr_3", "q-2", "dock", {"dock": "D3"})
        assert_problem(full, 429, "busy")
        assert full.headers["retry-after"] == "1"
        assert_problem(client.get("/v1/commands/q-2"), 404, "unknown-key")


def test_per_client_concurrency_limit_is_429_and_other_clients_are_unaffected(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("forklift_1", "forklift", start_x=2.0, start_y=4.0, time_scale=0.3)
    fleet.start_orchestrator()
    http_server.start(max_in_flight_per_client=1)
    answers: list[httpx.Response] = []

    def waiting_submit() -> None:
        with http_server.client() as client:
            answers.append(post_command(client, "forklift_1", "slow", "pick", {"slot": "A4"}, 60))

    worker = threading.Thread(target=waiting_submit)
    worker.start()
    with http_server.client() as client:
        deadline = time.monotonic() + 20
        while (
            'fleet_http_requests_in_flight{client_id="wms"} 1.0' not in client.get("/metrics").text
        ):
            assert time.monotonic() < deadline, "the first submit never got in flight"
            time.sleep(0.05)
        second = post_command(client, "forklift_1", "other", "dock", {"dock": "D1"})
        problem = assert_problem(second, 429, "busy")
        assert second.headers["retry-after"] == "1" and "wms" in problem["detail"]
    with http_server.client(MES_KEY) as mes:
        assert post_command(mes, "forklift_1", "other", "dock", {"dock": "D1"}).status_code == 202
    worker.join(timeout=90)
    assert answers and answers[0].status_code == 200, answers


def test_api_keys_scope_keys_per_client(fleet: FleetHarness, http_server: HttpServer) -> None:
    fleet.start_agent("amr_1", "amr")
    fleet.start_orchestrator()
    http_server.start()
    with http_server.client(api_key=None) as anonymous:
        assert_problem(
            post_command(anonymous, "amr_1", "shared", "dock", {"dock": "D1"}), 401, "unauthorized"
        )
        assert anonymous.get("/v1/robots").status_code == 401
    with http_server.client("not-a-configured-key-at-all") as stranger:
        answer = post_command(stranger, "amr_1", "shared", "dock", {"dock": "D1"})
        assert_problem(answer, 401, "unauthorized")
        assert answer.headers["www-authenticate"] == "Bearer"
    with http_server.client() as wms, http_server.client(MES_KEY) as mes:
        # The same key from two API keys: two operations, neither a replay of the other.
        first = post_command(wms, "amr_1", "shared", "dock", {"dock": "D1"}, wait_s=20)
        assert first.status_code == 200, first.text
        assert_problem(mes.get("/v1/commands/shared"), 404, "unknown-key")
        second = post_command(mes, "amr_1", "shared", "dock", {"dock": "D4"}, wait_s=20)
        assert second.status_code == 200 and "idempotent-replayed" not in second.headers
        assert second.json()["result"] != first.json()["result"]
        mes_events = mes.get("/v1/events").json()["events"]
        assert mes_events and {e["client_id"] for e in mes_events} <= {"mes", ""}
    with http_server.client(OPS_KEY) as ops:
        clients = {e["client_id"] for e in ops.get("/v1/events").json()["events"]}
        assert {"wms", "mes"} <= clients
    assert effects(fleet, "wms", "shared", "amr_1") == 1
    assert effects(fleet, "mes", "shared", "amr_1") == 1


def test_twenty_concurrent_posts_of_one_key_execute_once(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("forklift_2", "forklift", start_x=2.0, start_y=8.0, time_scale=0.1)
    fleet.start_orchestrator()
    http_server.start()

    async def burst() -> list[httpx.Response]:
        async with http_server.async_client() as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/v1/robots/forklift_2/commands",
                        json={
                            "command_type": "pick",
                            "payload": {"slot": "A5"},
                            "wait_timeout_sec": 30,
                        },
                        headers={"Idempotency-Key": "burst"},
                    )
                    for _ in range(20)
                )
            )

    answers = asyncio.run(burst())
    codes = sorted(a.status_code for a in answers)
    assert set(codes) <= {200, 202, 409}, codes
    finals = [a for a in answers if a.status_code == 200]
    assert finals, codes
    assert len({a.content for a in finals}) == 1
    assert sum(1 for a in finals if "idempotent-replayed" not in a.headers) <= 1
    with http_server.client() as client:
        assert wait_until_state(client, "burst", ("completed",))["result"]["item"] == "P-5"
    assert effects(fleet, "wms", "burst", "forklift_2") == 1


def test_orchestrator_restart_under_the_server_is_503_then_success_nothing_lost(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("amr_1", "amr", time_scale=0.05)
    fleet.start_orchestrator()
    http_server.start(answer_timeout_s=2.0)
    keys = [f"r-{i}" for i in range(4)]
    with http_server.client() as client:
        for key in keys[:2]:
            answer = post_command(client, "amr_1", key, "move_to_waypoint", {"waypoint": "W2"})
            assert answer.status_code == 202, answer.text
        fleet.children.kill("orchestrator", signal.SIGKILL)
        down = post_command(client, "amr_1", keys[2], "move_to_waypoint", {"waypoint": "W3"})
        assert_problem(down, 503, "orchestrator-unavailable")
        assert down.headers["retry-after"] == "1"
        assert_problem(client.get(f"/v1/commands/{keys[0]}"), 503, "orchestrator-unavailable")
        fleet.start_orchestrator()

        def with_retries(key: str, waypoint: str) -> httpx.Response:
            """A client honouring Retry-After, re-sending the same key."""
            for _attempt in range(30):
                answer = post_command(
                    client, "amr_1", key, "move_to_waypoint", {"waypoint": waypoint}, wait_s=30
                )
                if answer.status_code != 503:
                    return answer
                time.sleep(float(answer.headers["retry-after"]))
            pytest.fail(f"{key} still 503 after 30 tries")

        waypoints = ["W2", "W2", "W3", "W4"]
        for key, waypoint in zip(keys, waypoints, strict=True):
            assert with_retries(key, waypoint).status_code == 200
    for key in keys:
        assert effects(fleet, "wms", key, "amr_1") == 1


def test_a_post_waiting_across_an_orchestrator_restart_is_answered_by_the_new_one(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("amr_1", "amr", time_scale=0.3)
    fleet.start_orchestrator()
    # The server gives up at wait + 0.5 s, before a first send's patience (wait + 1 s)
    # ends: only the new orchestrator's boot id can make it re-send the lost request.
    http_server.start(answer_timeout_s=0.5)
    answers: list[httpx.Response] = []
    with http_server.client() as client:
        waiting = threading.Thread(
            target=lambda: answers.append(
                post_command(
                    client, "amr_1", "across", "move_to_waypoint", {"waypoint": "W3"}, wait_s=30
                )
            )
        )
        waiting.start()
        fleet.spin_until(
            lambda: fleet.statuses["amr_1"].current_key == robot_key("wms", "across"),
            "the move to be under way",
        )
        fleet.children.kill("orchestrator", signal.SIGKILL)
        fleet.start_orchestrator()
        waiting.join(timeout=60.0)
    assert answers, "no answer within the client's timeout"
    assert answers[0].status_code == 200, answers[0].text
    assert effects(fleet, "wms", "across", "amr_1") == 1
