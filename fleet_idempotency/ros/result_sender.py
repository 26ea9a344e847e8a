"""Publishing the answers of every agent of a process: alone when idle, batched when not.

Flat combining, without a thread or a timer: whoever finds the sender idle publishes
what is waiting, and keeps publishing until nothing is; an answer that arrives meanwhile
(from another agent's worker, or the executor's 202) is left for that publisher and
goes out in its next batch. A lone answer therefore leaves at once, as before, and
under load several answers share one message. No ROS import: the two publish functions
are handed in.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

MAX_RESULTS_PER_BATCH = 64  # CommandResultBatch.msg promises receivers this bound

Message = TypeVar("Message")


class ResultSender(Generic[Message]):
    def __init__(
        self,
        publish_one: Callable[[Message], None],
        publish_batch: Callable[[list[Message]], None],
        *,
        max_batch: int = MAX_RESULTS_PER_BATCH,
    ) -> None:
        self._publish_one = publish_one
        self._publish_batch = publish_batch
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._waiting: deque[Message] = deque()
        self._publishing = False
        self.singles = 0
        self.batches = 0
        self.batched = 0  # answers sent inside batches

    def send(self, message: Message) -> None:
        with self._lock:
            self._waiting.append(message)
            if self._publishing:
                return  # the thread publishing now sends it next
            self._publishing = True
        try:
            while True:
                with self._lock:
                    if not self._waiting:
                        self._publishing = False
                        return
                    count = min(len(self._waiting), self._max_batch)
                    taken = [self._waiting.popleft() for _ in range(count)]
                if len(taken) == 1:
                    self.singles += 1
                    self._publish_one(taken[0])
                else:
                    self.batches += 1
                    self.batched += len(taken)
                    self._publish_batch(taken)
        except BaseException:
            # What is still waiting goes with the next send; a lost answer is re-fetched
            # by the orchestrator's re-send, answered from the robot's store.
            with self._lock:
                self._publishing = False
            raise
