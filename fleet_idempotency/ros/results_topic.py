"""Subscribing to robots' results: /fleet/results and /fleet/result_batches as one stream.

Agents send a result alone when nothing else waits and several as one CommandResultBatch
under load (``ros/result_sender.py``), so every consumer of results takes both topics;
this is the one place that knows that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleet_idempotency.msg import CommandResult, CommandResultBatch

RESULTS_TOPIC = "/fleet/results"
RESULT_BATCHES_TOPIC = "/fleet/result_batches"


def subscribe_to_results(
    node: Any,
    on_result: Callable[[CommandResult], None],
    qos: Any,
    **subscription_options: Any,
) -> None:
    """``on_result`` for every result, alone or in a batch (a batch holds at most 64: the
    message's bounded sequence, enforced by the middleware before any of our code runs)."""

    def on_batch(batch: CommandResultBatch) -> None:
        for result in batch.results:
            on_result(result)

    node.create_subscription(CommandResult, RESULTS_TOPIC, on_result, qos, **subscription_options)
    node.create_subscription(
        CommandResultBatch, RESULT_BATCHES_TOPIC, on_batch, qos, **subscription_options
    )
