"""Group commit: many concurrent writers of one process share one transaction and one fsync.

Only one commit of the process runs at a time. A caller that finds no commit running and
nothing queued commits its own job at once, in its own thread: a lone claim pays no
hand-off to another thread (on a small VM waking a thread and being woken back cost as
much as 100 µs, a third of a durable commit). Jobs that arrive while a commit runs are
queued for the writer thread, which drains everything queued into the next transaction,
so under load the cost approaches one fsync per batch instead of one per claim. No delay
is ever added to wait for more jobs.

Background jobs (GC steps) never share a transaction with foreground jobs and take turns
with them: a claim waits for at most one GC step, and GC still progresses under load.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import StoreClosed, StoreError
from .metrics import Metrics
from .persistence.base import CapacityExhausted, PersistenceBackend, WriteView

T = TypeVar("T")


class _Job:
    """One write and its completion signal.

    A pre-acquired lock rather than a Future: completing and waiting is one lock release
    and one acquire, a fraction of a Future's condition variable and callbacks.
    """

    __slots__ = ("_done", "_ok", "_value", "apply")

    def __init__(self, apply: Callable[[WriteView], Any]) -> None:
        self.apply = apply
        self._done = threading.Lock()
        self._done.acquire()
        self._ok = False
        self._value: Any = None

    def complete(self, ok: bool, value: Any) -> None:
        self._ok = ok
        self._value = value
        self._done.release()

    def result(self) -> Any:
        self._done.acquire()
        if self._ok:
            return self._value
        raise self._value


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
        # Guards the queues and the flags; the writer waits on it.
        self._cond = threading.Condition(threading.Lock())
        self._foreground: deque[_Job] = deque()
        self._background: deque[_Job] = deque()
        # A commit is being prepared or running, by the writer or by an inline caller.
        self._busy = False
        # The last writer transaction passed a queued background job over.
        self._background_due = False
        self._closed = False
        self._thread = threading.Thread(
            target=self._run, name="idempotency-store-writer", daemon=True
        )
        self._thread.start()

    def submit(self, apply: Callable[[WriteView], T], *, background: bool = False) -> T:
        """Run ``apply`` in a write transaction; return once that transaction is durable.

        ``apply`` must raise (a StoreError) only before writing anything: its batch-mates
        are committed regardless, so a half-applied job would be committed too.
        ``background`` marks maintenance work that must not delay foreground writes.
        """
        job = _Job(apply)
        with self._cond:
            if self._closed:
                raise StoreClosed("the idempotency store is closed")
            inline = not self._busy and not self._foreground and not self._background
            if inline:
                self._busy = True
            else:
                (self._background if background else self._foreground).append(job)
                if not self._busy:
                    self._cond.notify()
        if inline:
            try:
                self._commit([job])
            finally:
                with self._cond:
                    self._busy = False
                    if self._foreground or self._background or self._closed:
                        self._cond.notify()
        result: T = job.result()
        return result

    def close(self) -> None:
        """Refuse new jobs, finish the queued ones, stop the writer."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def _next_batch(self) -> list[_Job]:
        # Caller holds self._cond and at least one queue is non-empty.
        if self._background and (self._background_due or not self._foreground):
            self._background_due = False
            return [self._background.popleft()]
        self._background_due = bool(self._background)
        take = min(self._max_batch, len(self._foreground))
        return [self._foreground.popleft() for _ in range(take)]

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._busy or not (self._foreground or self._background):
                    if self._closed and not self._busy:
                        return
                    self._cond.wait()
                self._busy = True
                batch = self._next_batch()
            try:
                self._commit(batch)
            finally:
                with self._cond:
                    self._busy = False

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
                batch[0].complete(False, full)
            return
        except BaseException as failure:  # the writer thread must survive anything
            for job in batch:
                job.complete(False, failure)
            return
        self._metrics.record_commit(len(batch))
        for job, (ok, value) in zip(batch, results, strict=True):
            job.complete(ok, value)
        self._on_commit()
