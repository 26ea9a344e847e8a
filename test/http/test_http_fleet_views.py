"""Robots, the event log (paged and streamed) and the metrics, from a real fleet."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from support.fleet_harness import FleetHarness
from support.http_harness import OPS_KEY, HttpServer, post_command
from support.ros_support import wait_for


def metric_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def test_robots_events_paged_and_streamed_and_metrics(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("amr_1", "amr", time_scale=0.05)
    fleet.start_agent("forklift_1", "forklift", start_x=2.0, start_y=4.0)
    fleet.start_orchestrator()
    http_server.start()
    http_server.wait_for_robots(["amr_1", "forklift_1"])

    streamed: list[dict[str, Any]] = []
    stream_open = threading.Event()

    def follow() -> None:
        with http_server.client() as client, client.stream("GET", "/v1/events/stream") as lines:
            assert lines.headers["content-type"].startswith("text/event-stream")
            stream_open.set()
            event_id = None
            for line in lines.iter_lines():
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("data: "):
                    event = json.loads(line[6:])
                    assert event["sequence"] == event_id
                    streamed.append(event)
                    if event["event_type"] == "result" and event["idempotency_key"] == "seen":
                        return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    assert stream_open.wait(10)
    with http_server.client() as client:
        first = post_command(client, "amr_1", "seen", "move_to_waypoint", {"waypoint": "W2"})
        assert first.status_code == 202
        follower.join(timeout=30)
        assert not follower.is_alive(), f"no result event streamed: {streamed}"
        streamed_kinds = [e["event_type"] for e in streamed if e["idempotency_key"] == "seen"]
        assert streamed_kinds[0] == "accepted" and streamed_kinds[-1] == "result"
        assert "dispatched" in streamed_kinds

        replay = post_command(client, "amr_1", "seen", "move_to_waypoint", {"waypoint": "W2"})
        assert replay.status_code == 200
        reused = post_command(client, "amr_1", "seen", "move_to_waypoint", {"waypoint": "W3"})
        assert reused.status_code == 422
        done = post_command(client, "forklift_1", "lift", "pick", {"slot": "A2"}, wait_s=20)
        assert done.status_code == 200

        # The event log, paged two by two, ends with the mismatch of "seen".
        paged: list[dict[str, Any]] = []
        after = 0
        deadline = time.monotonic() + 20
        while not any(e["event_type"] == "mismatch_rejected" for e in paged):
            assert time.monotonic() < deadline, paged
            page = client.get("/v1/events", params={"after": after, "limit": 2}).json()
            assert len(page["events"]) <= 2
            paged += page["events"]
            after = page["next_after"]
            if not page["events"]:
                time.sleep(0.1)
        sequences = [e["sequence"] for e in paged]
        assert sequences == sorted(set(sequences))
        kinds = {e["event_type"] for e in paged if e["idempotency_key"] == "seen"}
        assert {"accepted", "dispatched", "result", "duplicate_suppressed"} <= kinds
        assert client.get("/v1/events", params={"after": -1}).status_code == 400

        def robots_now() -> dict[str, dict[str, Any]]:
            return {r["robot_id"]: r for r in client.get("/v1/robots").json()["robots"]}

        robots = robots_now()
        deadline = time.monotonic() + 10
        while robots["amr_1"]["pose"]["x"] != 10.0:  # its next status shows it at W2
            assert time.monotonic() < deadline, robots["amr_1"]
            time.sleep(0.1)
            robots = robots_now()
        assert set(robots) == {s.id for s in _fleet_robots()}
        assert robots["amr_1"]["online"] and robots["amr_1"]["robot_type"] == "amr"
        assert robots["amr_1"]["capacity"] == 4 and not robots["amr_3"]["online"]
        assert robots["amr_1"]["ready"] and robots["amr_1"]["waiting_for"] == ""

        # The live state comes from the world simulator's service, which the server may not
        # have discovered yet on a loaded machine: until then it answers the map alone.
        world = wait_for(
            lambda: (w := client.get("/v1/world").json())["state"] is not None and w,
            timeout_s=20,
            what="/v1/world with the simulator's live state",
            poll_s=0.2,
        )
        assert world["geometry"]["slots"]["A1"]["kind"] == "pallet"
        assert world["state"]["slots"]["A2"] is None and world["state"]["carried"]

        page = client.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]

    with http_server.client(OPS_KEY) as ops:
        metrics = metric_values(ops.get("/metrics").text)
    assert metrics[("fleet_http_submits_total", (("outcome", "new"),))] == 2
    assert metrics[("fleet_http_submits_total", (("outcome", "replay"),))] == 1
    assert metrics[("fleet_http_submits_total", (("outcome", "mismatch"),))] == 1
    assert metrics[("fleet_dispatches_total", ())] >= 2
    assert metrics[("fleet_results_total", (("state", "completed"),))] >= 2
    assert metrics[("fleet_http_submit_to_final_seconds_count", ())] == 2
    assert metrics[("fleet_event_log_sequence", ())] >= max(sequences)
    assert ("fleet_robot_queue_depth", (("robot_id", "amr_1"),)) in metrics
    assert metrics[("fleet_robot_capacity", (("robot_id", "forklift_1"),))] == 4
    # From the agents' /diagnostics, published once a second: the first one after amr_1
    # stored its records may still be on its way.
    records = ("fleet_robot_store_records", (("robot_id", "amr_1"),))
    with http_server.client(OPS_KEY) as ops:
        wait_for(
            lambda: metric_values(ops.get("/metrics").text).get(records, 0) >= 1,
            timeout_s=15,
            what="amr_1's store size from its /diagnostics",
        )


def test_sigterm_stops_the_server_cleanly_with_an_event_stream_open(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    http_server.start(ready=False)  # no orchestrator in this test
    assert httpx.get(f"{http_server.base_url}/readyz").status_code == 503
    opened = threading.Event()

    def listen() -> None:
        with http_server.client() as client, client.stream("GET", "/v1/events/stream") as lines:
            opened.set()
            with contextlib.suppress(httpx.RemoteProtocolError):  # the server went away
                for _line in lines.iter_lines():
                    pass

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert opened.wait(10)
    # An open stream never ends by itself: shutdown must not wait for it forever.
    assert fleet.children.kill("http", signal.SIGTERM) == 0


def _fleet_robots() -> list[Any]:
    from fleet_idempotency.description.fleet import load_fleet

    from support.paths import FLEET_FILE

    return load_fleet(FLEET_FILE).robots


def test_an_event_batch_beyond_the_bound_is_cut_and_the_node_keeps_serving(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    """Anyone may publish on /fleet/event_batches: the node takes no more events from one
    message than the orchestrator ever puts in one (MAX_EVENTS_PER_BATCH)."""
    from fleet_idempotency.msg import FleetEvent, FleetEventBatch
    from fleet_idempotency.ros.convert import MAX_EVENTS_PER_BATCH
    from fleet_idempotency.ros.qos import RELIABLE_TOPIC_QOS

    http_server.start(ready=False)
    publisher = fleet.node.create_publisher(
        FleetEventBatch, "/fleet/event_batches", RELIABLE_TOPIC_QOS
    )
    fleet.spin_until(lambda: publisher.get_subscription_count() > 0, "the http node to listen")
    sent = MAX_EVENTS_PER_BATCH + 44
    publisher.publish(
        FleetEventBatch(
            events=[
                FleetEvent(
                    sequence=sequence,
                    event_type="accepted",
                    idempotency_key=f"k-{sequence}",
                    client_id="wms",
                    robot_id="amr_1",
                    detail_json="{}",
                )
                for sequence in range(1, sent + 1)
            ]
        )
    )

    def held() -> list[int]:
        with http_server.client(OPS_KEY) as client:
            answer = client.get("/v1/events", params={"after": 0, "limit": 1000})
        assert answer.status_code == 200
        return [event["sequence"] for event in answer.json()["events"]]

    wait_for(lambda: bool(held()), what="the batch's events", timeout_s=20.0)
    assert held() == list(range(1, MAX_EVENTS_PER_BATCH + 1))
    with http_server.client() as client:
        assert client.get("/healthz").status_code == 200
