"""In-process counters and claim latency of one open store.

Counters are per process (the agent's view); figures that live in the file (record
counts, map size) are added by ``IdempotencyStore.stats()``.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from typing import Any

COUNTER_NAMES = (
    "claims",
    "replays",
    "in_progress_hits",
    "mismatches",
    "expired_hits",
    "releases",
    "advances",
    "finishes",
    "gc_purged",
    "tombstones_written",
    "tombstones_purged",
    "gc_deferred_in_flight",
    "recovered_resumed",
    "recovered_interrupted",
    "recovered_reconciling",
    "store_full",
    "commits",
    "committed_writes",
    "map_resizes",
)

LATENCY_WINDOW = 4096
_BUCKETS_PER_OCTAVE = 16  # bucket edges 2^(1/16) apart: a percentile is within 4.4 %
_LOWEST_S = 1e-6
_BUCKETS = 30 * _BUCKETS_PER_OCTAVE + 2  # 1 µs .. ~1,000 s, plus under and over


class LatencyWindow:
    """Percentiles of the most recent 4,096 to 8,192 samples, in log-spaced buckets.

    A ring of raw samples had to be sorted for every snapshot, and agents take one per
    robot every second: that cost grew with the samples kept until the ring was full
    (6 % of an agent host's CPU after 60k commands). Here recording is O(1) and a
    snapshot walks a fixed number of buckets, however many claims came before. Two
    halves rotate so that old behaviour leaves the percentiles; memory stays fixed.
    Not thread-safe: ``Metrics`` holds its lock around every call.
    """

    def __init__(self, window: int = LATENCY_WINDOW) -> None:
        self.window = window
        self._current = [0] * _BUCKETS
        self._previous = [0] * _BUCKETS
        self._in_current = 0
        self._in_previous = 0

    def record(self, seconds: float) -> None:
        self._current[_bucket(seconds)] += 1
        self._in_current += 1
        if self._in_current >= self.window:
            self._previous, self._current = self._current, [0] * _BUCKETS
            self._in_previous, self._in_current = self._in_current, 0

    def __len__(self) -> int:
        return self._in_previous + self._in_current

    def percentile(self, fraction: float) -> float:
        """Upper edge of the bucket holding the ``fraction`` quantile (0.0 when empty)."""
        total = len(self)
        if not total:
            return 0.0
        rank = min(total - 1, int(fraction * total))  # as sorted(samples)[rank]
        seen = 0
        for index, (now, before) in enumerate(zip(self._current, self._previous, strict=True)):
            seen += now + before
            if seen > rank:
                return _upper_edge(index)
        raise AssertionError("unreachable: the counts add up to len(self)")


def _bucket(seconds: float) -> int:
    if not seconds > _LOWEST_S:  # zero, a negative clock step and NaN: the lowest bucket
        return 0
    octaves = math.log2(seconds / _LOWEST_S)
    return min(_BUCKETS - 1, 1 + int(octaves * _BUCKETS_PER_OCTAVE))


def _upper_edge(index: int) -> float:
    if index == _BUCKETS - 1:
        return math.inf
    return float(_LOWEST_S * 2.0 ** (index / _BUCKETS_PER_OCTAVE))


class Metrics:
    """Thread-safe counters plus the percentiles of recent claim latencies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter({name: 0 for name in COUNTER_NAMES})
        # Recent samples only: percentiles describe current behaviour, and memory stays
        # bounded however long the agent runs. The maximum is kept over the whole lifetime.
        self._latencies = LatencyWindow()
        self._latency_max = 0.0
        self._max_batch = 0

    def incr(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def record_commit(self, writes: int) -> None:
        with self._lock:
            self._counts["commits"] += 1
            self._counts["committed_writes"] += writes
            self._max_batch = max(self._max_batch, writes)

    def record_claim(self, name: str, seconds: float) -> None:
        """One claim's outcome counter and latency under a single lock acquisition."""
        with self._lock:
            self._counts[name] += 1
            self._record_latency(seconds)

    def record_claim_latency(self, seconds: float) -> None:
        with self._lock:
            self._record_latency(seconds)

    def _record_latency(self, seconds: float) -> None:
        # Caller holds self._lock.
        self._latencies.record(seconds)
        self._latency_max = max(self._latency_max, seconds)

    def count(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            data: dict[str, Any] = dict(self._counts)
            data["max_commit_batch"] = self._max_batch
            data["claim_latency_max_s"] = self._latency_max
            data["claim_latency_p50_s"] = self._latencies.percentile(0.50)
            data["claim_latency_p99_s"] = self._latencies.percentile(0.99)
            data["claim_latency_samples"] = len(self._latencies)
        return data
