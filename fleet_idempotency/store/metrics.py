"""In-process counters and claim latency of one open store.

Counters are per process (the agent's view); figures that live in the file (record
counts, map size) are added by ``IdempotencyStore.stats()``.
"""

from __future__ import annotations

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
    "store_full",
    "commits",
    "committed_writes",
    "map_resizes",
)

_RESERVOIR_SIZE = 4096


class Metrics:
    """Thread-safe counters plus a ring buffer of the most recent claim latencies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter({name: 0 for name in COUNTER_NAMES})
        # A ring of recent samples: percentiles describe current behaviour, and memory stays
        # bounded however long the agent runs. The maximum is kept over the whole lifetime.
        self._latencies: list[float] = []
        self._next_slot = 0
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
        if len(self._latencies) < _RESERVOIR_SIZE:
            self._latencies.append(seconds)
        else:
            self._latencies[self._next_slot] = seconds
            self._next_slot = (self._next_slot + 1) % _RESERVOIR_SIZE
        self._latency_max = max(self._latency_max, seconds)

    def count(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            data: dict[str, Any] = dict(self._counts)
            samples = sorted(self._latencies)
            data["max_commit_batch"] = self._max_batch
            data["claim_latency_max_s"] = self._latency_max
        data["claim_latency_p50_s"] = _percentile(samples, 0.50)
        data["claim_latency_p99_s"] = _percentile(samples, 0.99)
        data["claim_latency_samples"] = len(samples)
        return data


def _percentile(sorted_samples: list[float], fraction: float) -> float:
    if not sorted_samples:
        return 0.0
    index = min(len(sorted_samples) - 1, int(fraction * len(sorted_samples)))
    return sorted_samples[index]
