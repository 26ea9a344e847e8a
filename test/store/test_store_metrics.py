"""Claim-latency percentiles: close to the exact ones, recent only, fixed cost."""

from __future__ import annotations

import math
import random

import pytest

from fleet_idempotency.store.metrics import LatencyWindow, Metrics

RESOLUTION = 2 ** (1 / 16)  # neighbouring bucket edges


def exact(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.9, 0.99, 1.0])
def test_percentiles_are_within_one_bucket_of_the_exact_ones(fraction: float) -> None:
    rng = random.Random(7)
    samples = [rng.lognormvariate(math.log(2e-4), 1.5) for _ in range(3000)]
    window = LatencyWindow()
    for seconds in samples:
        window.record(seconds)
    truth = exact(samples, fraction)
    # The answer is the upper edge of the bucket that holds the exact percentile.
    assert truth <= window.percentile(fraction) <= truth * RESOLUTION
    assert len(window) == 3000


def test_old_samples_leave_the_percentiles() -> None:
    window = LatencyWindow(window=100)
    for _ in range(100):
        window.record(5.0)  # a slow spell
    assert window.percentile(0.5) >= 5.0
    for _ in range(200):
        window.record(1e-3)  # two windows of fast claims push the spell out
    assert len(window) == 100  # the last full window; the next one starts empty
    assert 1e-3 <= window.percentile(0.99) <= 1e-3 * RESOLUTION


def test_extreme_and_odd_samples_land_in_the_end_buckets() -> None:
    window = LatencyWindow()
    assert window.percentile(0.5) == 0.0  # nothing recorded yet
    for seconds in (0.0, -0.5, math.nan):
        window.record(seconds)
    assert window.percentile(1.0) == pytest.approx(1e-6)
    window.record(1e12)
    assert window.percentile(1.0) == math.inf


def test_metrics_snapshot_reports_recent_percentiles_and_lifetime_max() -> None:
    metrics = Metrics()
    metrics.record_claim_latency(2.0)
    for _ in range(2 * 4096):
        metrics.record_claim("claims", 1e-4)
    stats = metrics.snapshot()
    assert stats["claims"] == 2 * 4096
    assert stats["claim_latency_max_s"] == 2.0  # the lifetime maximum stays
    assert stats["claim_latency_p99_s"] <= 1e-4 * RESOLUTION  # the 2 s sample aged out
    assert stats["claim_latency_samples"] == 4097  # a full window and one in the next
