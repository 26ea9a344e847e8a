"""Side nodes spun apart from a node's main executor (ros/side_thread.py)."""

from __future__ import annotations

import threading
import time
import types
from typing import Any

import pytest
from rclpy.executors import SingleThreadedExecutor
from std_msgs.msg import String

from fleet_idempotency.ros import side_thread
from fleet_idempotency.ros.qos import RELIABLE_TOPIC_QOS, quiet_subscription_events
from fleet_idempotency.ros.side_thread import EventsSpinner, keep_serving, side_node, spin_on_thread

TIMEOUT_S = 20.0


def test_an_events_spinner_serves_many_subscriptions_and_stops_its_thread(
    ros_context: Any,
) -> None:
    listening = side_node("events_listening", ros_context)
    heard: dict[str, int] = {}
    lock = threading.Lock()

    def on(topic: str, _message: String) -> None:
        with lock:
            heard[topic] = heard.get(topic, 0) + 1

    topics = [f"/side_thread_test/t{index}" for index in range(20)]
    for topic in topics:
        listening.create_subscription(
            String,
            topic,
            lambda message, topic=topic: on(topic, message),
            RELIABLE_TOPIC_QOS,
            event_callbacks=quiet_subscription_events(),
        )
    spinner = EventsSpinner(listening, "events-listening")
    talking = side_node("events_talking", ros_context)
    publishers = [talking.create_publisher(String, t, RELIABLE_TOPIC_QOS) for t in topics]
    talker = spin_on_thread(talking, "events-talking")
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            with lock:
                if len(heard) == len(topics):
                    break
            assert time.monotonic() < deadline, f"heard only {sorted(heard)}"
            for publisher in publishers:
                publisher.publish(String(data="x"))
            time.sleep(0.05)
    finally:
        assert spinner.shutdown(timeout_sec=1.0)
        talker.shutdown(timeout_sec=1.0)
    # Nothing of the spinner is left inside rclpy when the context goes.
    assert not [t for t in threading.enumerate() if t.name == "events-listening"]
    for node in (listening, talking):
        node.destroy_node()


@pytest.mark.parametrize("spinner_kind", ["single", "events"])
def test_a_side_thread_serves_on_after_a_callback_raises(
    ros_context: Any, spinner_kind: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A FleetClient's user callback that raises once must not leave the client deaf."""
    listening = side_node(f"raising_{spinner_kind}", ros_context)
    calls: list[str] = []

    def on_message(message: String) -> None:
        calls.append(message.data)
        if len(calls) == 1:
            raise RuntimeError("a user callback that fails once")

    topic = f"/side_thread_test/raising_{spinner_kind}"
    listening.create_subscription(
        String, topic, on_message, RELIABLE_TOPIC_QOS, event_callbacks=quiet_subscription_events()
    )
    thread_name = f"raising-{spinner_kind}"
    spinner: EventsSpinner | SingleThreadedExecutor = (
        EventsSpinner(listening, thread_name)
        if spinner_kind == "events"
        else spin_on_thread(listening, thread_name)
    )
    talking = side_node(f"raising_talker_{spinner_kind}", ros_context)
    publisher = talking.create_publisher(String, topic, RELIABLE_TOPIC_QOS)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(calls) < 3:
            assert time.monotonic() < deadline, f"served only {len(calls)} messages"
            publisher.publish(String(data="x"))
            time.sleep(0.05)
        assert [t for t in threading.enumerate() if t.name == thread_name]
    finally:
        spinner.shutdown(timeout_sec=1.0)
        for node in (listening, talking):
            node.destroy_node()
    assert "a user callback that fails once" in capfd.readouterr().err


def _failing(times: int) -> tuple[list[int], Any]:
    """A serve loop that raises its first ``times`` runs, then returns."""
    runs: list[int] = []

    def serve() -> None:
        runs.append(len(runs))
        if len(runs) <= times:
            raise RuntimeError(f"failure {len(runs)}")

    return runs, serve


def test_keep_serving_reports_an_error_once_per_period_and_serves_on(
    capfd: pytest.CaptureFixture[str],
) -> None:
    runs, serve = _failing(3)
    keep_serving(serve, lambda: True)
    assert len(runs) == 4  # three failures, then the run that returned
    err = capfd.readouterr().err
    # The first is printed; the two within the report period are only counted.
    assert err.count("error while serving") == 1
    assert "failure 1" in err and "failure 2" not in err


def test_keep_serving_ends_quietly_when_the_context_has_gone(
    capfd: pytest.CaptureFixture[str],
) -> None:
    runs, serve = _failing(10)
    keep_serving(serve, lambda: False)
    assert len(runs) == 1
    assert capfd.readouterr().err == ""


def test_keep_serving_pauses_between_back_to_back_failures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    clock = iter(range(10**6))  # a microsecond per reading: back to back, on any machine
    fake_time = types.SimpleNamespace(monotonic=lambda: next(clock) * 1e-6, sleep=pauses.append)
    monkeypatch.setattr(side_thread, "time", fake_time)
    runs, serve = _failing(4)
    keep_serving(serve, lambda: True)
    assert len(runs) == 5
    # The first failure has no predecessor; each later one came at once after another.
    assert pauses == [side_thread.ERROR_PAUSE_S] * 3
