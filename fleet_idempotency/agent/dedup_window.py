"""A small in-memory window of recent deliveries, to drop exact repeats cheaply.

Only an optimisation: a repeat that slips past (window full, process restarted) is
answered by the store like any other duplicate. Correctness never rests on this window.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable


class RecentDeliveries:
    def __init__(
        self,
        max_entries: int = 4096,
        ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._seen: OrderedDict[Hashable, float] = OrderedDict()
        self.dropped = 0

    def is_repeat(self, delivery_id: Hashable) -> bool:
        """True if ``delivery_id`` was seen within the window (and count it as dropped)."""
        now = self._clock()
        while self._seen:
            oldest, seen_at = next(iter(self._seen.items()))
            if now - seen_at <= self.ttl_s and len(self._seen) < self.max_entries:
                break
            del self._seen[oldest]
        if delivery_id in self._seen:
            self.dropped += 1
            return True
        self._seen[delivery_id] = now
        return False
