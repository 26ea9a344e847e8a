"""The robot-side logic of the agent driver, free of ROS.

Order of operations for each delivery, and why:

1. drop exact transport repeats (cheap, optional; the store is the real guard);
2. validate key, target robot, command type and payload: a 400 stores nothing;
3. if the queue is full and the key is new: 429, nothing stored (same as claim+release);
4. claim the key in the store (durable) *before* any side effect;
5. the worker prepares (may refuse: release the key, 4xx), executes, records the final
   result, and only then publishes it.

A duplicate is answered from the store at step 4 and never reaches the worker.
"""

from __future__ import annotations

import json
import queue
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from fleet_idempotency.agent.dedup_window import RecentDeliveries
from fleet_idempotency.commands import InvalidCommand, parse_payload, validate_command
from fleet_idempotency.protocol import (
    BAD_REQUEST,
    BUSY,
    INTERNAL,
    OK,
    STORE_FULL,
    Answer,
    Delivery,
    KeyStatus,
    answer_for_outcome,
    answer_for_record,
    key_status,
)
from fleet_idempotency.robots.backend import (
    Command,
    CommandRefused,
    ExecutionAborted,
    ExecutionFailed,
    RobotBackend,
)
from fleet_idempotency.store import (
    Claimed,
    GcReport,
    IdempotencyStore,
    InvalidRequest,
    Record,
    State,
    StoreError,
    StoreFull,
    validate_key,
)


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


@dataclass(frozen=True)
class _Work:
    command: Command
    delivery: Delivery


class AgentCore:
    def __init__(
        self,
        *,
        backend: RobotBackend,
        store: IdempotencyStore,
        capacity: int,
        publish: AnswerSink,
        logger: Logger,
        on_load_change: Any = None,
        dedup_window: RecentDeliveries | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.robot_id = backend.robot_id
        self.backend = backend
        self.store = store
        self.capacity = capacity
        self._publish = publish
        self._log = logger
        self._on_load_change = on_load_change or (lambda: None)
        self._dedup = dedup_window
        self._work: queue.Queue[_Work | None] = queue.Queue()
        self._lock = threading.Lock()
        self._queue_depth = 0
        self._current_key = ""
        self._worker: threading.Thread | None = None
        self.counters: Counter[str] = Counter()

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Report what crash recovery found, queue resumed commands, start the worker."""
        report = self.store.last_recovery
        for record in report.interrupted:
            self.counters["interrupted_reported"] += 1
            self._log.warning(
                f"{record.command_type} {record.key!r} was interrupted by a crash; "
                "reported INTERRUPTED for reconciliation, not re-run"
            )
            self._publish(answer_for_record(record))
        for record in report.resumed:
            self.counters["resumed"] += 1
            self._log.info(f"resuming {record.command_type} {record.key!r} after a crash")
            delivery = Delivery(
                key=record.key,
                client_id="",
                robot_id=record.robot_id,
                command_type=record.command_type,
                payload_json=record.payload_json,
                attempt=record.attempt,
            )
            command = Command(
                robot_id=self.robot_id,
                key=record.key,
                command_type=record.command_type,
                payload=parse_payload(record.command_type, record.payload_json),
                resumed=True,
            )
            self._enqueue(_Work(command, delivery))
        self._worker = threading.Thread(
            target=self._run, name=f"{self.robot_id}-executor", daemon=True
        )
        self._worker.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Abort the running command (its claim stays IN_PROGRESS for recovery) and stop."""
        self.backend.shutdown()
        self._work.put(None)
        if self._worker is not None:
            self._worker.join(timeout_s)

    # --- deliveries -----------------------------------------------------------------------
    def submit(self, delivery: Delivery) -> Answer | None:
        """Handle one delivery; publish and return the immediate answer (None: dropped)."""
        if self._dedup is not None and self._dedup.is_repeat(
            (delivery.key, delivery.attempt, delivery.payload_json, delivery.command_type)
        ):
            self.counters["transport_repeats_dropped"] += 1
            return None
        answer = self._answer(delivery)
        self.counters[f"answer_{answer.status_code}"] += 1
        if answer.replayed:
            self.counters["replays"] += 1
        self._publish(answer)
        return answer

    def _answer(self, delivery: Delivery) -> Answer:
        try:
            validate_key(delivery.key)
            command = self._validate(delivery)
        except (InvalidCommand, InvalidRequest) as invalid:
            return Answer.rejected(delivery, BAD_REQUEST, str(invalid))

        if self._full() and not isinstance(self.store.check(self.robot_id, delivery.key), Record):
            # A new key while full: refuse before claiming, which equals claim-then-release.
            return Answer.rejected(
                delivery,
                BUSY,
                f"{self.robot_id} is busy ({self.capacity} commands queued); retry later",
            )
        try:
            outcome = self.store.claim(
                scope=self.robot_id,
                key=delivery.key,
                robot_id=self.robot_id,
                command_type=delivery.command_type,
                payload_json=delivery.payload_json,
            )
        except InvalidRequest as invalid:
            return Answer.rejected(delivery, BAD_REQUEST, str(invalid))
        except StoreFull as full:
            return Answer.rejected(delivery, STORE_FULL, str(full))
        if isinstance(outcome, Claimed):
            self._enqueue(_Work(command, delivery))
        return answer_for_outcome(delivery, outcome)

    def _validate(self, delivery: Delivery) -> Command:
        if delivery.robot_id != self.robot_id:
            raise InvalidCommand(
                "robot_id", f"command for {delivery.robot_id!r} delivered to {self.robot_id!r}"
            )
        payload = validate_command(
            self.backend.robot_type,
            delivery.command_type,
            delivery.payload_json,
            max_payload_bytes=self.store.config.max_payload_bytes,
        )
        return Command(
            robot_id=self.robot_id,
            key=delivery.key,
            command_type=delivery.command_type,
            payload=payload,
        )

    # --- status ---------------------------------------------------------------------------
    def check_key(self, key: str) -> KeyStatus:
        try:
            found = self.store.check(self.robot_id, key)
        except InvalidRequest as invalid:
            return KeyStatus(
                found=False, state=State.UNKNOWN, status_code=BAD_REQUEST, message=str(invalid)
            )
        return key_status(found, key, expired_key_policy=self.store.config.expired_key_policy)

    def load(self) -> Load:
        with self._lock:
            return Load(
                queue_depth=self._queue_depth,
                capacity=self.capacity,
                busy=bool(self._current_key),
                current_key=self._current_key,
            )

    def collect_garbage(self, max_batches: int = 1) -> GcReport:
        return self.store.gc(max_batches=max_batches)

    # --- execution ------------------------------------------------------------------------
    def _full(self) -> bool:
        with self._lock:
            return self._queue_depth >= self.capacity

    def _enqueue(self, work: _Work) -> None:
        with self._lock:
            self._queue_depth += 1
        self._work.put(work)
        self._on_load_change()

    def _run(self) -> None:
        while (work := self._work.get()) is not None:
            with self._lock:
                self._current_key = work.command.key
            self._on_load_change()
            try:
                answer = self._execute(work)
            except ExecutionAborted:
                self._log.info(f"{work.command.key!r} left IN_PROGRESS at shutdown for recovery")
                return
            finally:
                with self._lock:
                    self._queue_depth -= 1
                    self._current_key = ""
            if answer is not None:
                self._publish(answer)
            self._on_load_change()

    def _execute(self, work: _Work) -> Answer | None:
        command, delivery = work.command, work.delivery
        try:
            self.backend.prepare(command)
        except CommandRefused as refusal:
            self.store.release(self.robot_id, command.key)
            self.counters["refused_released"] += 1
            return Answer.rejected(delivery, refusal.status_code, refusal.message)

        try:
            body = self.backend.execute(command)
            state, code, result_json = State.COMPLETED, OK, json.dumps(body, sort_keys=True)
        except ExecutionFailed as failure:
            state, code = State.FAILED, failure.status_code
            result_json = json.dumps({"error": failure.message})
        except ExecutionAborted:
            raise
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
        self.counters[f"executed_{state.name.lower()}"] += 1
        return answer_for_record(record, client_id=delivery.client_id, attempt=delivery.attempt)
