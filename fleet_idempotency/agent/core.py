"""The robot-side logic of the agent driver, free of ROS.

Order of operations for each delivery, and why:

1. drop exact transport repeats (cheap, optional; the store is the real guard);
2. validate key, target robot, command type and payload: a 400 stores nothing;
3. if the key is new and the queue is full (429) or the backend not ready (503): refused,
   nothing stored (same as claim+release);
4. claim the key in the store (durable) *before* any side effect;
5. the executor (``executor.py``) prepares (may refuse: release the key, 4xx), executes,
   records the final result, and only then publishes it.

The answer to step 4 (202) of a command the idle worker starts at once may be held for
a moment and dropped if the final result goes first (``delayed_acks.py``).

A duplicate is answered from the store at step 4 and never reaches the worker.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable

from fleet_idempotency.agent.dedup_window import RecentDeliveries
from fleet_idempotency.auth import CommandVerifier, Verdict
from fleet_idempotency.commands import InvalidCommand, parse_payload, validate_command
from fleet_idempotency.protocol import (
    BAD_REQUEST,
    BUSY,
    INTERNAL,
    STORE_FULL,
    UNAVAILABLE,
    Answer,
    Delivery,
    KeyStatus,
    answer_for_outcome,
    answer_for_record,
    key_status,
)
from fleet_idempotency.robots.backend import Command, RobotBackend
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

from .delayed_acks import DelayedAcks
from .executor import AnswerSink, Executor, Load, Logger, Work
from .fencing import META_NAME as FENCE_META
from .fencing import FencingGate

__all__ = ["AgentCore", "AnswerSink", "Load", "Logger"]


class AgentCore:
    def __init__(
        self,
        *,
        backend: RobotBackend,
        store: IdempotencyStore,
        capacity: int,
        publish: AnswerSink,
        logger: Logger,
        on_load_change: Callable[[], None] | None = None,
        dedup_window: RecentDeliveries | None = None,
        verifier: CommandVerifier | None = None,
        delayed_acks: DelayedAcks | None = None,
    ) -> None:
        """``delayed_acks``: hold the 202 of a command that starts at once (None: every
        answer is published at once)."""
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.robot_id = backend.robot_id
        self.backend = backend
        self.store = store
        self.capacity = capacity
        self._publish = publish
        self._log = logger
        self._dedup = dedup_window
        # None: an unauthenticated fleet (every command accepted, as before keyrings).
        self.verifier = verifier
        self._delayed_acks = delayed_acks
        self._hold_lock = threading.Lock()
        self.counters: Counter[str] = Counter()
        self.fence = FencingGate(
            lambda: store.read_meta(FENCE_META),
            lambda value: store.write_meta(FENCE_META, value),
        )
        self._executor = Executor(
            backend=backend,
            store=store,
            capacity=capacity,
            publish=self._publish_final,
            logger=logger,
            on_load_change=on_load_change or (lambda: None),
            counters=self.counters,
        )

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Report what crash recovery found, queue resumed commands and those to reconcile
        with the robot, start the worker."""
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
            self._executor.enqueue(self._recovered_work(record, reconcile=False))
        for record in report.reconciling:
            self.counters["reconciling"] += 1
            self._log.info(
                f"asking the robot what became of {record.command_type} {record.key!r}, "
                "begun before a crash"
            )
            self._executor.enqueue(self._recovered_work(record, reconcile=True))
        self._executor.start()

    def _recovered_work(self, record: Record, *, reconcile: bool) -> Work:
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
        return Work(command, delivery, reconcile=reconcile)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Abort the running command (its claim stays IN_PROGRESS for recovery) and stop."""
        self._executor.stop(timeout_s)

    # --- deliveries -----------------------------------------------------------------------
    def submit(self, delivery: Delivery) -> Answer | None:
        """Handle one delivery; publish and return the immediate answer (None: dropped)."""
        if self.verifier is not None:
            verdict = self.verifier.verify(delivery, delivery.auth_key_id, delivery.auth_tag)
            if verdict is not Verdict.AUTHENTIC:
                # Before the dedup window, so a forgery cannot shadow the real command, and
                # answered nowhere: a forger learns nothing, not even that we listen.
                self.counters["auth_rejected"] += 1
                self.counters[f"auth_rejected_{verdict.name.lower()}"] += 1
                if self.counters["auth_rejected"] in (1, 10, 100) or not (
                    self.counters["auth_rejected"] % 1000
                ):
                    self._log.warning(
                        f"dropped an unauthenticated command ({verdict.value}); "
                        f"{self.counters['auth_rejected']} so far"
                    )
                return None
        if not self._admitted_by_fence(delivery):
            return None
        if self._dedup is not None and self._dedup.is_repeat(
            (delivery.key, delivery.attempt, delivery.payload_json, delivery.command_type)
        ):
            self.counters["transport_repeats_dropped"] += 1
            return None
        answer, held = self._answer(delivery)
        self.counters[f"answer_{answer.status_code}"] += 1
        if answer.replayed:
            self.counters["replays"] += 1
        if not held:
            self._publish(answer)
        return answer

    def _publish_final(self, answer: Answer) -> None:
        """The worker's answer (final, or a refusal that released the key): it says more
        than a 202 still held for the key, which is dropped."""
        if self._delayed_acks is not None:
            with self._hold_lock:
                if self._delayed_acks.settle((self.robot_id, answer.key)):
                    self.counters["acks_superseded"] += 1
        self._publish(answer)

    def _admitted_by_fence(self, delivery: Delivery) -> bool:
        try:
            if self.fence.admit(delivery.fencing_token):
                return True
        except StoreError as error:
            # The fence could not be raised durably: run nothing under the new token.
            self.counters["store_errors"] += 1
            self._log.error(f"could not record fencing token {delivery.fencing_token}: {error}")
            return False
        self.counters["fenced_stale"] += 1
        if (
            self.counters["fenced_stale"] in (1, 10, 100)
            or not self.counters["fenced_stale"] % 1000
        ):
            self._log.warning(
                f"dropped a command with fencing token {delivery.fencing_token} below "
                f"{self.fence.highest} (a replica that lost its lease); "
                f"{self.counters['fenced_stale']} so far"
            )
        return False

    def _answer(self, delivery: Delivery) -> tuple[Answer, bool]:
        """The immediate answer, and whether it is held (``delayed_acks``), not to be
        published now."""
        try:
            validate_key(delivery.key)
            command = self._validate(delivery)
        except (InvalidCommand, InvalidRequest) as invalid:
            return Answer.rejected(delivery, BAD_REQUEST, str(invalid)), False

        readiness = self.backend.readiness()
        if (self._executor.full() or not readiness.ready) and not isinstance(
            self.store.check(self.robot_id, delivery.key), Record
        ):
            # A new key while full or not ready: refuse before claiming, which equals
            # claim-then-release (a known key is answered from the store as ever).
            if not readiness.ready:
                self.counters["refused_not_ready"] += 1
                return Answer.rejected(
                    delivery,
                    UNAVAILABLE,
                    f"{self.robot_id} is not ready: waiting for {readiness.waiting_for}; "
                    "retry later",
                ), False
            return Answer.rejected(
                delivery,
                BUSY,
                f"{self.robot_id} is busy ({self.capacity} commands queued); retry later",
            ), False
        try:
            outcome = self.store.claim(
                scope=self.robot_id,
                key=delivery.key,
                robot_id=self.robot_id,
                command_type=delivery.command_type,
                payload_json=delivery.payload_json,
            )
        except InvalidRequest as invalid:
            return Answer.rejected(delivery, BAD_REQUEST, str(invalid)), False
        except StoreFull as full:
            return Answer.rejected(delivery, STORE_FULL, str(full)), False
        except StoreError as error:
            # Nothing was claimed, so nothing runs: refused, and the sender is told why.
            self.counters["store_errors"] += 1
            failed = f"{self.robot_id}'s store failed: {error}"
            return Answer.rejected(delivery, INTERNAL, failed), False
        answer = answer_for_outcome(delivery, outcome)
        if not isinstance(outcome, Claimed):
            return answer, False
        # The worker may finish before this thread runs on: it settles under the same lock,
        # so it finds the 202 held (and drops it) instead of overtaking it.
        with self._hold_lock:
            starts_now = self._executor.enqueue(Work(command, delivery))
            if not starts_now or self._delayed_acks is None:
                return answer, False
            self._delayed_acks.hold(
                (self.robot_id, answer.key), functools.partial(self._publish, answer)
            )
            return answer, True

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
            supported=self.backend.supported_commands(),
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
        return self._executor.load()

    def collect_garbage(self, max_batches: int = 1) -> GcReport:
        return self.store.gc(max_batches=max_batches)
