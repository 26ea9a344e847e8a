"""The idempotency semantics: claim before executing, replay after, recover after a crash.

Every state change is one function over a ``WriteView`` that runs inside a single write
transaction of the group committer, so "check then insert" is one atomic step: the
transaction is the compare-and-swap, across threads (one writer thread) and across
processes (LMDB's writer lock, or PostgreSQL's guarded writes re-run on conflict).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, TypeVar

from . import owner as owner_identity
from .config import StoreConfig
from .errors import (
    FinalResultConflict,
    InvalidRequest,
    NotClaimed,
    StoreError,
    StoreFull,
    UnknownKey,
)
from .group_commit import GroupCommitter
from .keys import validate_key, validate_scope
from .metrics import Metrics
from .outcomes import (
    Claimed,
    ClaimOutcome,
    Expired,
    GcReport,
    InProgress,
    Mismatch,
    RecoveryReport,
    Replay,
)
from .persistence import open_backend
from .persistence.base import PersistenceBackend, ReadView, WriteView
from .records import Record, State, Tombstone
from .requests import (
    ClaimRequest,
    ValidClaim,
    validate_claim,
    validate_final_state,
    validate_result,
    validate_status_code,
)

Clock = Callable[[], float]
T = TypeVar("T")

# Status code cached for a command whose owner died mid-execution.
INTERRUPTED_STATUS_CODE = 500
_OUTCOME_COUNTER: dict[type, str] = {
    Claimed: "claims",
    Replay: "replays",
    InProgress: "in_progress_hits",
    Mismatch: "mismatches",
    Expired: "expired_hits",
}
_WAIT_POLL_MIN_S = 0.001
_WAIT_POLL_MAX_S = 0.05


class IdempotencyStore:
    """A durable seen-key store. Open with ``IdempotencyStore.open(config)``."""

    def __init__(
        self,
        config: StoreConfig,
        backend: PersistenceBackend,
        *,
        clock: Clock,
        owner: str,
        owner_alive: Callable[[str], bool],
    ) -> None:
        self.config = config
        self.owner = owner
        self._backend = backend
        self._clock = clock
        self._owner_alive = owner_alive
        self._metrics = Metrics()
        # Notified after every commit of this process so that waiters wake immediately.
        self._changed = threading.Condition()
        self._committer: GroupCommitter | None = None
        if not backend.readonly:
            self._committer = GroupCommitter(
                backend,
                self._metrics,
                max_batch=config.group_commit_max_batch,
                on_commit=self._notify_waiters,
            )
        self.last_recovery = RecoveryReport()
        self._closed = False

    @classmethod
    def open(
        cls,
        config: StoreConfig,
        *,
        clock: Clock = time.time,
        readonly: bool = False,
        recover: bool = True,
        owner: str | None = None,
        owner_alive: Callable[[str], bool] = owner_identity.is_alive,
    ) -> IdempotencyStore:
        """Open (creating if needed) the store at ``config.path`` or ``config.url``.

        Unless ``readonly`` or ``recover=False``, in-flight records of dead owners are
        resolved at once; the result is kept in ``last_recovery`` (resumed records must be
        re-run by the caller). ``owner``/``owner_alive`` exist for tests that simulate
        other processes.
        """
        backend = open_backend(config, readonly=readonly)
        store = cls(
            config,
            backend,
            clock=clock,
            owner=owner or owner_identity.current_owner(),
            owner_alive=owner_alive,
        )
        if recover and not readonly:
            try:
                store.recover()
            except BaseException:
                store.close()
                raise
        return store

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._committer is not None:
            self._committer.close()
        self._backend.close()

    def __enter__(self) -> IdempotencyStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- claims ----------------------------------------------------------------------------

    def claim(
        self,
        *,
        scope: str,
        key: str,
        robot_id: str,
        command_type: str,
        payload_json: str,
        initial_state: State = State.IN_PROGRESS,
        retention_s: float | None = None,
    ) -> ClaimOutcome:
        """Claim ``key`` in ``scope`` before executing the command it names.

        Returns Claimed only to the one caller that must execute; the claim is durable when
        this returns. Duplicates get Replay/InProgress/Mismatch/Expired and must not run.
        """
        started = time.perf_counter()
        request = ClaimRequest(
            scope, key, robot_id, command_type, payload_json, initial_state, retention_s
        )
        # Fast path: a key already present is answered from a read snapshot, without
        # queueing behind writers. The snapshot is a valid linearisation point: the record
        # existed then. Only a key that looks new needs the write transaction. Scope and key
        # are checked first because the lookup needs them; the rest of the request is
        # validated before any answer (a bad request is a 400 even for a known key).
        scope, key = validate_scope(scope), validate_key(key)
        with self._read() as view:
            record = view.get_record(scope, key)
            tombstone = view.get_tombstone(scope, key) if record is None else None
        valid = validate_claim(self.config, request, stored=record)
        outcome = self._existing_outcome(record, tombstone, valid, self._clock())
        if outcome is None:
            outcome = self._write(lambda view: self._claim_in(view, valid, check_space=True))
        self._metrics.record_claim(_OUTCOME_COUNTER[type(outcome)], time.perf_counter() - started)
        return outcome

    def claim_many(self, requests: Iterable[ClaimRequest]) -> list[ClaimOutcome]:
        """Claim several keys in one transaction and one fsync; outcomes in request order.

        All requests are validated first (nothing is stored if one is invalid), and the
        batch either fits under the claim limit as a whole or raises StoreFull.
        """
        started = time.perf_counter()
        valid: list[ValidClaim] = []
        for index, request in enumerate(requests):
            try:
                valid.append(validate_claim(self.config, request))
            except InvalidRequest as bad:
                raise InvalidRequest(f"requests[{index}].{bad.field}", str(bad)) from None
        if not valid:
            return []

        def apply(view: WriteView) -> list[ClaimOutcome]:
            self._require_space(view, sum(r.size_estimate for r in valid))
            return [self._claim_in(view, request, check_space=False) for request in valid]

        outcomes = self._write(apply)
        for outcome in outcomes:
            self._metrics.incr(_OUTCOME_COUNTER[type(outcome)])
        self._metrics.record_claim_latency(time.perf_counter() - started)
        return outcomes

    def _existing_outcome(
        self, record: Record | None, tombstone: Tombstone | None, request: ValidClaim, now: float
    ) -> ClaimOutcome | None:
        """The answer for a key that already has a record or live tombstone; None if new.

        ``tombstone`` is only consulted when there is no record.
        """
        if record is not None:
            if record.state.is_final and record.expires_at <= now:
                # Expired but not yet collected: answer exactly as GC's tombstone would, so
                # the answer never depends on when GC last ran.
                return self._expired_answer(self._tombstone_of(record), now)
            if record.fingerprint != request.fingerprint:
                return Mismatch(record, request.fingerprint)
            if record.state.is_in_flight:
                return InProgress(record)
            return Replay(record)
        if tombstone is not None:
            return self._expired_answer(tombstone, now)
        return None

    def _expired_answer(self, tombstone: Tombstone, now: float) -> ClaimOutcome | None:
        if tombstone.tombstone_expires_at <= now or self.config.expired_key_policy == "new":
            return None
        return Expired(tombstone)

    def _tombstone_of(self, record: Record) -> Tombstone:
        # Dated from the record's expiry, not from the GC run, for the same reason.
        return Tombstone.of_record(
            record, expired_at=record.expires_at, keep_for_s=self.config.tombstone_retention_s
        )

    def _claim_in(self, view: WriteView, request: ValidClaim, *, check_space: bool) -> ClaimOutcome:
        now = self._clock()
        stale = view.get_record(request.scope, request.key)
        stale_tombstone = view.get_tombstone(request.scope, request.key)
        existing = self._existing_outcome(stale, stale_tombstone, request, now)
        if existing is not None:
            return existing
        if check_space:
            self._require_space(view, request.size_estimate)
        # Whatever is left under this key is expired (policy or tombstone lapse): replace it.
        if stale is not None:
            view.delete_record(stale)
        if stale_tombstone is not None:
            view.delete_tombstone(stale_tombstone)
        record = Record(
            scope=request.scope,
            key=request.key,
            fingerprint=request.fingerprint,
            state=request.initial_state,
            status_code=202,
            result_json="",
            robot_id=request.robot_id,
            command_type=request.command_type,
            payload_json=request.payload_json,
            owner=self.owner,
            created_at=now,
            updated_at=now,
            expires_at=now + request.retention_s,
            retention_s=request.retention_s,
        )
        view.put_record(record, None)
        return Claimed(record)

    def _require_space(self, view: WriteView, extra_bytes: int) -> None:
        used = view.used_bytes()
        limit = self.config.claim_limit_bytes
        if used + extra_bytes > limit:
            raise StoreFull(
                f"the store at {self.config.location} holds {used} bytes of live data and new "
                f"claims are limited to {limit} bytes (map_size_max minus headroom); new "
                "claims are refused until GC frees space, stored records are intact"
            )

    # -- state changes after a claim -----------------------------------------------------

    def advance(self, scope: str, key: str, state: State = State.IN_PROGRESS) -> Record:
        """ACCEPTED -> IN_PROGRESS (the orchestrator dispatches a queued command)."""
        scope, key = validate_scope(scope), validate_key(key)
        if state != State.IN_PROGRESS:
            raise InvalidRequest(
                "state", f"advance only moves ACCEPTED to IN_PROGRESS, got {state!r}"
            )

        def apply(view: WriteView) -> Record:
            record = self._require_record(view, scope, key)
            if record.state == State.IN_PROGRESS:
                return record
            if record.state != State.ACCEPTED:
                raise NotClaimed(scope, key, f"key {key!r} is {record.state.name}, not ACCEPTED")
            advanced = record.replace(state=State.IN_PROGRESS, updated_at=self._clock())
            view.put_record(advanced, record)
            return advanced

        result = self._write(apply)
        self._metrics.incr("advances")
        return result

    def finish(
        self, scope: str, key: str, *, state: State, status_code: int, result_json: str
    ) -> Record:
        """Record the final result atomically; the retention window restarts from now.

        Repeating the same finish is a no-op returning the stored record; a different result
        for an already final record raises FinalResultConflict (the first result stands).
        """
        scope, key = validate_scope(scope), validate_key(key)
        final_state = validate_final_state(state)
        code = validate_status_code(status_code)
        body = validate_result(self.config, result_json)

        def apply(view: WriteView) -> Record:
            record = self._require_record(view, scope, key)
            if record.state.is_final:
                if (record.state, record.status_code, record.result_json) == (
                    final_state,
                    code,
                    body,
                ):
                    return record
                raise FinalResultConflict(
                    f"key {key!r} already ended {record.state.name} with status "
                    f"{record.status_code}; a different final result ({final_state.name}, "
                    f"{code}) is refused, the first result stands"
                )
            now = self._clock()
            finished = record.replace(
                state=final_state,
                status_code=code,
                result_json=body,
                updated_at=now,
                expires_at=now + record.retention_s,
            )
            view.put_record(finished, record)
            return finished

        result = self._write(apply)
        self._metrics.incr("finishes")
        return result

    def release(self, scope: str, key: str) -> Record:
        """Remove an in-flight claim refused before any side effect, so a retry may run it.

        A final record is never released (NotClaimed): its command did run.
        """
        scope, key = validate_scope(scope), validate_key(key)

        def apply(view: WriteView) -> Record:
            record = self._require_record(view, scope, key)
            if record.state.is_final:
                raise NotClaimed(
                    scope,
                    key,
                    f"key {key!r} is {record.state.name}: a final result is never released, "
                    "because a retry would execute the command a second time",
                )
            view.delete_record(record)
            return record

        result = self._write(apply)
        self._metrics.incr("releases")
        return result

    @staticmethod
    def _require_record(view: ReadView, scope: str, key: str) -> Record:
        record = view.get_record(scope, key)
        if record is None:
            raise UnknownKey(scope, key)
        return record

    # -- reads -----------------------------------------------------------------------------

    def check(self, scope: str, key: str) -> Record | Tombstone | None:
        """Status check: the record, else its tombstone, else None. Never writes."""
        scope, key = validate_scope(scope), validate_key(key)
        with self._read() as view:
            record = view.get_record(scope, key)
            return record if record is not None else view.get_tombstone(scope, key)

    def wait_for_final(self, scope: str, key: str, timeout_s: float) -> Record | None:
        """Wait until ``key`` is final; returns the final record.

        Returns None if the key has no record (never claimed, released, or collected), and
        the still in-flight record when ``timeout_s`` runs out. A finish in this process
        wakes the waiter at once; one in another process is seen by polling with backoff.
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        delay = _WAIT_POLL_MIN_S
        while True:
            with self._changed:
                found = self.check(scope, key)
                record = found if isinstance(found, Record) else None
                remaining = deadline - time.monotonic()
                if record is None or record.state.is_final or remaining <= 0:
                    return record
                self._changed.wait(min(delay, remaining))
            delay = min(delay * 2, _WAIT_POLL_MAX_S)

    def iter_records(
        self,
        *,
        state: State | None = None,
        command_type: str | None = None,
        older_than_s: float | None = None,
        scope: str | None = None,
    ) -> Iterator[Record]:
        """Records in (scope, key) order, filtered; read in short snapshots (safe while live)."""
        cutoff = None if older_than_s is None else self._clock() - older_than_s
        for record in self._backend.iter_all_records():
            if state is not None and record.state != state:
                continue
            if command_type is not None and record.command_type != command_type:
                continue
            if scope is not None and record.scope != scope:
                continue
            if cutoff is not None and record.created_at > cutoff:
                continue
            yield record

    def iter_tombstones(self) -> Iterator[Tombstone]:
        return self._backend.iter_all_tombstones()

    def stats(self) -> dict[str, Any]:
        """Counters of this process plus what the file holds now."""
        data = self._metrics.snapshot()
        with self._read() as view:
            counts = view.counts()
        data.update(
            records=counts.records,
            tombstones=counts.tombstones,
            in_flight=counts.in_flight,
            used_bytes=counts.used_bytes,
            file_bytes=counts.file_bytes,
            map_size=counts.map_size,
            map_size_max=self.config.map_size_max,
            claim_limit_bytes=self.config.claim_limit_bytes,
            map_resizes=self._backend.resize_count(),
        )
        return data

    # -- recovery and GC ---------------------------------------------------------------------

    def recover(self) -> RecoveryReport:
        """Resolve in-flight records whose owner process is dead, by command-type policy.

        ``resume``: re-owned by this process and returned for re-running (ACCEPTED records
        always resume: they never started, so nothing can be repeated). ``interrupt``:
        marked INTERRUPTED with status 500, final and cached, for reconciliation.
        ``reconcile``: re-owned and returned for the caller to ask the robot. Records of
        live owners are untouched; the whole pass is one transaction, so two processes
        recovering at once never both resume the same record.
        """

        def apply(view: WriteView) -> RecoveryReport:
            now = self._clock()
            resumed: list[Record] = []
            interrupted: list[Record] = []
            reconciling: list[Record] = []
            for record in view.in_flight_records():
                if record.owner == self.owner or self._owner_alive(record.owner):
                    continue
                policy = self.config.recovery_policy_for(record.command_type)
                if record.state == State.ACCEPTED or policy in ("resume", "reconcile"):
                    updated = record.replace(
                        owner=self.owner, attempt=record.attempt + 1, updated_at=now
                    )
                    if record.state != State.ACCEPTED and policy == "reconcile":
                        reconciling.append(updated)
                    else:
                        resumed.append(updated)
                else:
                    updated = record.replace(
                        state=State.INTERRUPTED,
                        status_code=INTERRUPTED_STATUS_CODE,
                        result_json=_interrupted_body(record),
                        updated_at=now,
                        expires_at=now + record.retention_s,
                    )
                    interrupted.append(updated)
                view.put_record(updated, record)
            return RecoveryReport(resumed=resumed, interrupted=interrupted, reconciling=reconciling)

        report = self._write(apply)
        self._metrics.incr("recovered_resumed", len(report.resumed))
        self._metrics.incr("recovered_interrupted", len(report.interrupted))
        self._metrics.incr("recovered_reconciling", len(report.reconciling))
        self.last_recovery = report
        return report

    def gc_step(self) -> GcReport:
        """One short GC transaction of at most ``gc_batch_size`` records and tombstones."""
        batch = self.config.gc_batch_size

        def apply(view: WriteView) -> GcReport:
            now = self._clock()
            purged = written = deferred = 0
            expired = view.expired_records(now, batch)
            for record in expired:
                if record.state.is_in_flight:
                    # Still running (or awaiting recovery): purging it would let a retry
                    # execute the command again. Push its expiry forward instead.
                    view.put_record(record.replace(expires_at=now + record.retention_s), record)
                    deferred += 1
                    continue
                view.delete_record(record)
                purged += 1
                tombstone = self._tombstone_of(record)
                if tombstone.tombstone_expires_at > now:
                    view.put_tombstone(tombstone, view.get_tombstone(record.scope, record.key))
                    written += 1
            dead_tombstones = view.expired_tombstones(now, batch)
            for tombstone in dead_tombstones:
                view.delete_tombstone(tombstone)
            return GcReport(
                records_purged=purged,
                tombstones_written=written,
                tombstones_purged=len(dead_tombstones),
                in_flight_deferred=deferred,
                batches=1,
                complete=len(expired) < batch and len(dead_tombstones) < batch,
            )

        # Background: a GC step never shares a transaction with claims, and claims queued
        # behind it go first, so a claim waits for at most one (small) step.
        report = self._write(apply, background=True)
        self._metrics.incr("gc_purged", report.records_purged)
        self._metrics.incr("tombstones_written", report.tombstones_written)
        self._metrics.incr("tombstones_purged", report.tombstones_purged)
        self._metrics.incr("gc_deferred_in_flight", report.in_flight_deferred)
        return report

    def gc(self, max_batches: int | None = None) -> GcReport:
        """Collect expired entries batch by batch, each batch its own short transaction."""
        total = GcReport(batches=0)
        while max_batches is None or total.batches < max_batches:
            total = total + self.gc_step()
            if total.complete:
                break
        return total

    def in_flight_records(self) -> list[Record]:
        """Every ACCEPTED/IN_PROGRESS record, from the in-flight index (no full scan)."""
        with self._read() as view:
            return view.in_flight_records()

    # -- small named values beside the records ---------------------------------------------

    def read_meta(self, name: str) -> bytes | None:
        """A value stored with ``write_meta`` (None if never written)."""
        with self._read() as view:
            return view.get_meta(name)

    def write_meta(self, name: str, value: bytes) -> None:
        """Store ``value`` under ``name``, durably (same commit rules as a claim)."""
        self._write(lambda view: view.put_meta(name, value))

    # -- plumbing -------------------------------------------------------------------------

    def _read(self) -> AbstractContextManager[ReadView]:
        if self._closed:
            raise StoreError("the idempotency store is closed")
        return self._backend.read()

    def _write(self, apply: Callable[[WriteView], T], *, background: bool = False) -> T:
        if self._committer is None:
            self._backend.run_write(apply)  # raises ReadOnlyStore with a clear message
        assert self._committer is not None
        try:
            return self._committer.submit(apply, background=background)
        except StoreFull:
            self._metrics.incr("store_full")
            raise

    def _notify_waiters(self) -> None:
        with self._changed:
            self._changed.notify_all()


def _interrupted_body(record: Record) -> str:
    return json.dumps(
        {
            "error": "interrupted",
            "message": (
                f"the process executing {record.command_type} {record.key!r} died before "
                "recording a result; the command may be partly done and needs reconciliation"
            ),
            "previous_owner": record.owner,
        },
        sort_keys=True,
    )
