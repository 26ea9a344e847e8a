"""Results go out alone when the sender is idle and together when they queue up."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fleet_idempotency.ros.result_sender import ResultSender

from support.ros_support import wait_for


def test_a_lone_result_goes_out_alone_and_at_once() -> None:
    singles: list[int] = []
    batches: list[list[int]] = []
    sender = ResultSender(singles.append, batches.append)
    sender.send(1)
    sender.send(2)
    assert singles == [1, 2] and batches == []  # published inside send: no added delay


def test_results_that_queue_during_a_publish_leave_together_in_order() -> None:
    published: list[list[int]] = []
    first_publish_started = threading.Event()
    release_first_publish = threading.Event()

    def publish_one(result: int) -> None:
        published.append([result])
        if result == 0:
            first_publish_started.set()
            assert release_first_publish.wait(10)

    sender = ResultSender(publish_one, published.append, max_batch=3)
    slow = threading.Thread(target=sender.send, args=(0,))
    slow.start()
    assert first_publish_started.wait(10)
    for result in range(1, 6):  # other agents' results meanwhile: queued, not blocked
        sender.send(result)
    assert published == [[0]]
    release_first_publish.set()
    slow.join(10)
    # The publishing thread sends what waited, at most max_batch per message.
    assert published == [[0], [1, 2, 3], [4, 5]]
    assert (sender.singles, sender.batches, sender.batched) == (1, 2, 5)


def test_a_failed_publish_leaves_the_sender_usable() -> None:
    singles: list[int] = []

    def publish_one(result: int) -> None:
        if result == 1:
            raise RuntimeError("publisher gone")
        singles.append(result)

    sender = ResultSender(publish_one, lambda batch: None)
    with pytest.raises(RuntimeError):
        sender.send(1)
    sender.send(2)
    assert singles == [2]


def test_many_threads_lose_no_result_and_repeat_none() -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def record(results: list[int]) -> None:
        with lock:
            seen.extend(results)

    sender = ResultSender(lambda r: record([r]), record)
    threads = [
        threading.Thread(target=lambda base=base: [sender.send(base + i) for i in range(500)])
        for base in range(0, 4000, 500)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(seen) == list(range(4000))


def test_subscribers_get_batched_and_lone_results_alike_over_dds(ros_context: Any) -> None:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from fleet_idempotency.msg import CommandResult, CommandResultBatch
    from fleet_idempotency.ros.qos import RELIABLE_TOPIC_QOS
    from fleet_idempotency.ros.results_topic import (
        RESULT_BATCHES_TOPIC,
        RESULTS_TOPIC,
        subscribe_to_results,
    )

    agent = rclpy.create_node("agent_side", context=ros_context)
    orchestrator = rclpy.create_node("orchestrator_side", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(orchestrator)
    try:
        received: list[str] = []
        subscribe_to_results(orchestrator, lambda r: received.append(r.idempotency_key), 100)
        single = agent.create_publisher(CommandResult, RESULTS_TOPIC, RELIABLE_TOPIC_QOS)
        batch = agent.create_publisher(CommandResultBatch, RESULT_BATCHES_TOPIC, RELIABLE_TOPIC_QOS)
        sender = ResultSender(
            single.publish, lambda items: batch.publish(CommandResultBatch(results=items))
        )
        wait_for(
            lambda: single.get_subscription_count() and batch.get_subscription_count(),
            what="both topics matched",
            executor=executor,
        )
        sender.send(CommandResult(idempotency_key="alone"))
        # What an agent process sends when three results queued up during a publish.
        batch.publish(
            CommandResultBatch(
                results=[CommandResult(idempotency_key=f"batched-{i}") for i in range(3)]
            )
        )
        wait_for(lambda: len(received) == 4, what="four results", executor=executor)
        assert sorted(received) == ["alone", "batched-0", "batched-1", "batched-2"]
        assert [k for k in received if k.startswith("batched")] == [
            "batched-0",
            "batched-1",
            "batched-2",
        ]
    finally:
        executor.shutdown()
        agent.destroy_node()
        orchestrator.destroy_node()
