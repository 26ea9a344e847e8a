"""Group commit: many concurrent writers of one process share one transaction and one fsync.

A single writer thread owns every write transaction of the process. Callers enqueue a
job and block until the transaction holding it is durable. While the writer is inside an
fsync, new jobs pile up in the queue and all of them go into the next transaction, so
under load the cost approaches one fsync per batch instead of one per claim, and a lone
caller still gets its own immediate commit (no artificial delay is ever added).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from .errors import StoreClosed, StoreError
from .metrics import Metrics
from .persistence.base import CapacityExhausted, PersistenceBackend, WriteView

T = TypeVar("T")


class _Job:
    __slots__ = ("apply", "future")

    def __init__(self, apply: Callable[[WriteView], Any]) -> None:
        self.apply = apply
        self.future: Future[Any] = Future()


_STOP = object()


class GroupCommitter:
    def __init__(
        self,
        backend: PersistenceBackend,
        metrics: Metrics,
        *,
        max_batch: int,
        on_commit: Callable[[], None],
    ) -> None:
        self._backend = backend
        self._metrics = metrics
        self._max_batch = max_batch
        self._on_commit = on_commit
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._closed = False
        self._admission = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name="idempotency-store-writer", daemon=True
        )
        self._thread.start()

    def submit(self, apply: Callable[[WriteView], T]) -> T:
        """Run ``apply`` in a write transaction; return once that transaction is durable.

        ``apply`` must raise (a StoreError) only before writing anything: its batch-mates
        are committed regardless, so a half-applied job would be committed too.
        """
        job = _Job(apply)
        with self._admission:
            if self._closed:
                raise StoreClosed("the idempotency store is closed")
            self._queue.put(job)
        result: T = job.future.result()
        return result

    def close(self) -> None:
        with self._admission:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                return
            assert isinstance(first, _Job)
            batch = [first]
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                assert isinstance(item, _Job)
                batch.append(item)
            self._commit(batch)

    def _commit(self, batch: list[_Job]) -> None:
        def apply_all(view: WriteView) -> list[tuple[bool, Any]]:
            # Rebuilt from scratch on every call: the backend may re-run us after growing.
            results: list[tuple[bool, Any]] = []
            for job in batch:
                try:
                    results.append((True, job.apply(view)))
                except StoreError as refusal:
                    results.append((False, refusal))
            return results

        try:
            results = self._backend.run_write(apply_all)
        except CapacityExhausted as full:
            if len(batch) > 1:
                # Find out which jobs still fit: the small ones (finish, release) usually do.
                for job in batch:
                    self._commit([job])
            else:
                batch[0].future.set_exception(full)
            return
        except BaseException as failure:  # the writer thread must survive anything
            for job in batch:
                job.future.set_exception(failure)
            return
        self._metrics.record_commit(len(batch))
        for job, (ok, value) in zip(batch, results, strict=True):
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)
        self._on_commit()
