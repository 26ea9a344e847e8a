"""The agent's executor: one worker thread that runs claimed commands through the backend.

Everything here happens *after* the key was durably claimed: prepare (a refusal releases
the key, so a retry may run it), execute (any exception from here on is a final FAILED,
because side effects may have happened), record the final result, and only then
publish it. The queue depth it keeps is the robot's load.
"""

from __future__ import annotations

import json
import queue
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fleet_idempotency.protocol import (
    INTERNAL,
    OK,
    UNAVAILABLE,
    Answer,
    Delivery,
    answer_for_record,
)
from fleet_idempotency.robots.backend import (
    Command,
    CommandRefused,
    ExecutionAborted,
    ExecutionFailed,
    OutcomeUnknown,
    RobotBackend,
)
from fleet_idempotency.store import INTERRUPTED_STATUS_CODE, IdempotencyStore, State, StoreError

# How often a resumed command checks whether the backend became ready.
READY_POLL_S = 0.2


class Logger(Protocol):
    def info(self, message: str) -> Any: ...
    def warning(self, message: str) -> Any: ...
    def error(self, message: str) -> Any: ...


class AnswerSink(Protocol):
    def __call__(self, answer: Answer) -> None: ...


@dataclass(frozen=True)
class Load:
    queue_depth: int
    capacity: int
    busy: bool
    current_key: str
    last_finished_key: str = ""  # of the last command that ended with an answer


@dataclass(frozen=True)
class Work:
    command: Command
    delivery: Delivery
    # Claimed by a process that died: ask the backend what became of it, never run it.
    reconcile: bool = False


class Executor:
    def __init__(
        self,
        *,
        backend: RobotBackend,
        store: IdempotencyStore,
        capacity: int,
        publish: AnswerSink,
        logger: Logger,
        on_load_change: Callable[[], None],
        counters: Counter[str],
    ) -> None:
        self.robot_id = backend.robot_id
        self.backend = backend
        self.store = store
        self.capacity = capacity
        self._publish = publish
        self._log = logger
        self._on_load_change = on_load_change
        self._counters = counters
        self._work: queue.Queue[Work | None] = queue.Queue()
        self._lock = threading.Lock()
        self._queue_depth = 0
        self._current_key = ""
        self._last_finished_key = ""
        self._worker: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        self._worker = threading.Thread(
            target=self._run, name=f"{self.robot_id}-executor", daemon=True
        )
        self._worker.start()

    def stop(self, timeout_s: float) -> None:
        """Abort the running command (its claim stays IN_PROGRESS for recovery) and stop."""
        self._stopping.set()
        self.backend.shutdown()
        self._work.put(None)
        if self._worker is not None:
            self._worker.join(timeout_s)

    def full(self) -> bool:
        with self._lock:
            return self._queue_depth >= self.capacity

    def load(self) -> Load:
        with self._lock:
            return Load(
                queue_depth=self._queue_depth,
                capacity=self.capacity,
                busy=bool(self._current_key),
                current_key=self._current_key,
                last_finished_key=self._last_finished_key,
            )

    def enqueue(self, work: Work) -> bool:
        """Queue ``work``; True if the worker was idle with nothing queued (it starts now)."""
        with self._lock:
            starts_now = self._queue_depth == 0
            self._queue_depth += 1
        self._work.put(work)
        self._on_load_change()
        return starts_now

    def _run(self) -> None:
        while (work := self._work.get()) is not None:
            with self._lock:
                self._current_key = work.command.key
            self._on_load_change()
            answer: Answer | None = None
            try:
                answer = self._execute(work)
            except ExecutionAborted:
                self._log.info(f"{work.command.key!r} left IN_PROGRESS at shutdown for recovery")
                return
            except Exception as error:
                # The worker must outlive any one command: the claim stays in the store as it
                # is (IN_PROGRESS answers 409 to duplicates; recovery resolves it by policy).
                self._counters["executor_errors"] += 1
                self._log.error(f"{work.command.key!r}: unexpected {error!r}; worker continues")
            finally:
                with self._lock:
                    self._queue_depth -= 1
                    self._current_key = ""
                    if answer is not None:
                        self._last_finished_key = work.command.key
            try:
                if answer is not None:
                    self._publish(answer)
                self._on_load_change()
            except Exception as error:  # e.g. publishing while the node shuts down
                self._counters["publish_errors"] += 1
                self._log.error(f"could not publish the answer for {work.command.key!r}: {error!r}")

    def _wait_ready(self, command: Command) -> bool:
        """Whether the backend can take ``command`` now. A command resumed or reconciled
        after a crash is already claimed and must not be released: it waits for the
        backend instead (ExecutionAborted if the agent stops meanwhile, leaving it for the
        next start)."""
        if self.backend.readiness().ready:
            return True
        if not command.resumed:
            return False
        while not self.backend.readiness().ready:
            if self._stopping.wait(READY_POLL_S):
                raise ExecutionAborted(f"{command.key!r}: stopped while waiting for the backend")
        return True

    def _execute(self, work: Work) -> Answer | None:
        command, delivery = work.command, work.delivery
        if work.reconcile:
            return self._reconcile(work)
        if not self._wait_ready(command):
            # Claimed while the backend was ready, which it is no longer: nothing was
            # done, so the key is released as for any refusal before a side effect.
            self.store.release(self.robot_id, command.key)
            self._counters["refused_not_ready"] += 1
            readiness = self.backend.readiness()
            return Answer.rejected(
                delivery,
                UNAVAILABLE,
                f"{self.robot_id} is not ready: waiting for {readiness.waiting_for}; retry later",
            )
        try:
            self.backend.prepare(command)
        except CommandRefused as refusal:
            self.store.release(self.robot_id, command.key)
            self._counters["refused_released"] += 1
            return Answer.rejected(delivery, refusal.status_code, refusal.message)

        return self._record(work, lambda: self.backend.execute(command))

    def _reconcile(self, work: Work) -> Answer | None:
        """A command the dead process had begun: the backend asks the robot; it is never
        run again (``RobotBackend.reconcile``)."""
        self._wait_ready(work.command)  # a resumed-like wait: it is claimed already
        self._counters["reconciled"] += 1
        return self._record(work, lambda: self.backend.reconcile(work.command))

    def _record(self, work: Work, run: Callable[[], dict[str, Any]]) -> Answer | None:
        """Run ``run`` (execute or reconcile), record its outcome as final, answer it."""
        command, delivery = work.command, work.delivery
        try:
            body = run()
            state, code, result_json = State.COMPLETED, OK, json.dumps(body, sort_keys=True)
        except ExecutionFailed as failure:
            state, code = State.FAILED, failure.status_code
            result_json = json.dumps({"error": failure.message})
        except OutcomeUnknown as unknown:
            state, code = State.INTERRUPTED, INTERRUPTED_STATUS_CODE
            result_json = json.dumps({"error": "interrupted", "message": str(unknown)})
        except ExecutionAborted as aborted:
            if self._stopping.is_set():
                raise
            # Only a shutdown may leave a command in flight: an abort without one is a
            # backend fault after execution began, final like any other.
            self._log.error(f"{command.key!r}: the backend aborted without a shutdown")
            state, code = State.FAILED, INTERNAL
            result_json = json.dumps({"error": f"backend aborted: {aborted}"})
        except Exception as error:  # side effects may have happened: final
            self._log.error(f"{command.key!r} crashed the backend: {error!r}")
            state, code = State.FAILED, INTERNAL
            result_json = json.dumps({"error": f"backend error: {error}"})
        try:
            record = self.store.finish(
                self.robot_id, command.key, state=state, status_code=code, result_json=result_json
            )
        except StoreError as error:
            # Stays IN_PROGRESS: duplicates get 409 and recovery will resolve it by policy.
            self._log.error(f"could not record the result of {command.key!r}: {error}")
            return None
        self._counters[f"executed_{state.name.lower()}"] += 1
        return answer_for_record(record, client_id=delivery.client_id, attempt=delivery.attempt)
