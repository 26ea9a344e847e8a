"""The orchestrator's logic, free of ROS: submit admission, results, status checks, restore.

Every client submit is claimed in the orchestrator's own store, scoped per client, before
it is queued, so a retried submit is answered from the store and never queued twice.
Each queued command is dispatched to its robot under a robot-side key derived from
(client, key) and re-sent with the same key (attempt + 1, backoff with jitter) until the
robot's final result arrives; the robot's own store makes every re-send harmless.
When deliveries are due is the ``Dispatcher``'s job (``dispatch.py``); building and
appending events is the ``Journal``'s (``journal.py``). This module decides what a
submit or a result means for the store and the log.

Threads: the node calls ``submit``/``check_key`` from service threads and ``on_result``/
``on_status``/``tick`` from others; the dispatcher's lock guards the in-memory lanes, and
store writes (fsyncs) happen outside it so that concurrent submits share commits.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleet_idempotency.auth import CommandSigner
from fleet_idempotency.commands import InvalidCommand, validate_command
from fleet_idempotency.description.fleet import FleetConfig
from fleet_idempotency.events import EventLog, EventType, FleetEventRecord, FleetState, replay
from fleet_idempotency.protocol import (
    ACCEPTED,
    BAD_REQUEST,
    BUSY,
    CONFLICT,
    GONE,
    MISMATCH,
    RETRY_LATER,
    STORE_FULL,
    UNAVAILABLE,
    WITHDRAWN,
    Answer,
    Delivery,
    KeyStatus,
    key_status,
)
from fleet_idempotency.store import (
    Claimed,
    Expired,
    FinalResultConflict,
    IdempotencyStore,
    InProgress,
    InvalidRequest,
    Mismatch,
    NotClaimed,
    Record,
    Replay,
    State,
    StoreError,
    StoreFull,
    UnknownKey,
    validate_key,
)
from fleet_idempotency.store.keys import MAX_TOKEN_LENGTH

from .dispatch import (
    FINAL_STATES,
    Dispatcher,
    OrchestratorSettings,
    PendingCommand,
    ResultEffect,
    RobotLane,
    StatusEffect,
    robot_key,
)
from .journal import Journal, accepted_detail, result_detail, settled_detail

CLIENT_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
# A submit may wait at most this long for its final result; longer waits are the status
# check's job (and each waiting submit holds resources of the node).
MAX_WAIT_TIMEOUT_S = 300.0
# Robots advertise their queue capacity; no real robot queues thousands of commands, and a
# status claiming so (a bug, or a forged status) would make dispatch flood that robot.
MAX_ROBOT_CAPACITY = 1024
# A robot's boot id is a short random token (a uuid4 in hex); anything longer is not one.
MAX_BOOT_ID_LENGTH = 64
# Retry counts kept for duplicate_suppressed events: the most recently retried keys.
DUPLICATE_COUNTS_KEPT = 10_000

__all__ = [
    "OrchestratorCore",
    "OrchestratorSettings",
    "Progress",
    "SubmitAnswer",
    "SubmitRequest",
    "Withdrawal",
    "robot_key",
]


@dataclass(frozen=True)
class SubmitRequest:
    client_id: str
    key: str
    robot_id: str
    command_type: str
    payload_json: str
    # 0: answer at once (202 when queued); the node waits, but the core validates it.
    wait_timeout_s: float = 0.0


@dataclass(frozen=True)
class SubmitAnswer:
    state: State
    status_code: int
    replayed: bool = False
    result_json: str = ""
    message: str = ""

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES


@dataclass(frozen=True)
class Progress:
    """Where a command the orchestrator holds stands now (before its final result)."""

    state: State  # ACCEPTED (queued here) or IN_PROGRESS (sent to its robot)
    status_code: int
    message: str


@dataclass(frozen=True)
class Withdrawal:
    """The outcome of a client's request to withdraw a command (an action's cancel)."""

    withdrawn: bool
    message: str


class OrchestratorCore:
    def __init__(
        self,
        *,
        fleet: FleetConfig,
        store: IdempotencyStore,
        events: EventLog,
        settings: OrchestratorSettings | None = None,
        on_events_appended: Callable[[list[FleetEventRecord]], None] = lambda _events: None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        signer: CommandSigner | None = None,
        replicated: bool = False,
    ) -> None:
        self.settings = settings or OrchestratorSettings()
        # None: commands go unsigned (robots without a keyring accept them).
        self.signer = signer
        self.store = store
        self.events = events
        self._wall_clock = wall_clock
        # Replicated: no robot is ours until its lease is (``adopt``); see ``leases.py``.
        self.replicated = replicated
        lanes = {
            spec.id: RobotLane(spec.id, spec.type, spec.capacity, held=not replicated)
            for spec in fleet.robots
        }
        self._capabilities = {spec.id: spec.capabilities() for spec in fleet.robots}
        self._dispatcher = Dispatcher(lanes, self.settings, clock=clock, rng=rng or random.Random())
        self.counters: Counter[str] = Counter()
        self._journal = Journal(
            events, on_appended=on_events_appended, wall_clock=wall_clock, counters=self.counters
        )
        # Guards the maps below; the dispatcher's own lock guards the lanes.
        self._lock = threading.RLock()
        self._robots = lanes
        self._by_client_key: dict[tuple[str, str], PendingCommand] = {}
        self._rejections: dict[tuple[str, str], tuple[int, str]] = {}
        # How often each recently retried key came back, for the events' "count". Bounded:
        # a key retried after thousands of others restarts at 1, which a reader can live
        # with; a map that grows with every key ever retried is not.
        self._duplicates: OrderedDict[tuple[str, str], int] = OrderedDict()
        # Replicated: the lease keeper's word on whether a robot is still ours right now
        # (checked at each send: a lease may run out between two keeper steps).
        self.lease_token: Callable[[str], int | None] | None = None
        # Replicated: the last shared-log event looked at for commands other replicas took.
        self._followed_sequence = events.last_sequence() if replicated else 0

    # --- start-up -------------------------------------------------------------------------
    def restore(self) -> None:
        """Rebuild queues and in-flight commands from the event log and the store.

        The store is the truth about keys (claims are durable before any event is
        appended); the log adds what the store does not know: which commands were already
        dispatched and with which attempt. Gaps left by a crash between the two writes
        are filled with the missing events, so the log's replay again equals the store.
        """
        state = replay(self.events.read())
        in_flight = [r for r in self.store.iter_records() if r.state.is_in_flight]
        in_flight.sort(key=lambda record: record.created_at)
        with self._lock:
            for record in in_flight:
                if record.robot_id not in self._robots:
                    continue
                view = state.keys.get((record.scope, record.key))
                command = self._command_from_record(record)
                if view is None or view.state not in (State.ACCEPTED, State.IN_PROGRESS):
                    self._journal.append(EventType.ACCEPTED, command, accepted_detail(command))
                else:
                    command.attempt = view.attempts
                self._requeue(command)
                self.counters["restored"] += 1
            self._log_missing_results(state)
        self._journal.flush()

    def repair_log(self) -> None:
        """Replicas: log the claims and results a crashed replica stored in the shared
        store but died before logging (``restore`` does this for a lone orchestrator). Run
        at a replica's start; identities make a repair by two replicas at once harmless."""
        self._log_missing_results(replay(self.events.read()), log_claims=True)
        self._journal.flush()

    def _log_missing_results(self, state: FleetState, *, log_claims: bool = False) -> None:
        for record in self.store.iter_records():
            view = state.keys.get((record.scope, record.key))
            if view is None and (log_claims or record.state.is_final):
                # A result without its acceptance would be an orphan to replay.
                command = self._command_from_record(record)
                self._journal.append(EventType.ACCEPTED, command, accepted_detail(command))
            if record.state.is_final and (view is None or view.state != record.state):
                command = self._command_from_record(record)
                self._journal.append(EventType.RESULT, command, result_detail(record))
                self.counters["results_logged_late"] += 1

    def _command_from_record(self, record: Record) -> PendingCommand:
        return PendingCommand(
            client_id=record.scope,
            key=record.key,
            robot_id=record.robot_id,
            command_type=record.command_type,
            payload_json=record.payload_json,
            fingerprint=record.fingerprint,
            robot_key=robot_key(record.scope, record.key),
            claim_id=f"{record.created_at:.6f}",
        )

    # --- submits --------------------------------------------------------------------------
    def submit(self, request: SubmitRequest) -> SubmitAnswer:
        """Answer a client's submit at once (the node adds the optional wait)."""
        try:
            self._validate(request)
        except (InvalidCommand, InvalidRequest) as invalid:
            self.counters["invalid"] += 1
            return SubmitAnswer(State.REJECTED, BAD_REQUEST, message=str(invalid))
        client_key = (request.client_id, request.key)
        if self._dispatcher.queue_full(request.robot_id) and not isinstance(
            self.store.check(request.client_id, request.key), Record
        ):
            self.counters["queue_full"] += 1
            return SubmitAnswer(
                State.REJECTED,
                BUSY,
                message=f"the orchestrator queue for {request.robot_id} is full "
                f"({self.settings.queue_capacity_per_robot}); retry later",
            )
        try:
            outcome = self.store.claim(
                scope=request.client_id,
                key=request.key,
                robot_id=request.robot_id,
                command_type=request.command_type,
                payload_json=request.payload_json,
                initial_state=State.ACCEPTED,
            )
        except InvalidRequest as invalid:
            return SubmitAnswer(State.REJECTED, BAD_REQUEST, message=str(invalid))
        except StoreFull as full:
            return SubmitAnswer(State.REJECTED, STORE_FULL, message=str(full))
        except StoreError as error:
            # Nothing was claimed (a shared database unreachable): nothing is acknowledged.
            self.counters["store_unavailable"] += 1
            return SubmitAnswer(
                State.REJECTED, UNAVAILABLE, message=f"the key store is unavailable: {error}"
            )

        if isinstance(outcome, Claimed):
            record = outcome.record
            command = self._command_from_record(record)
            with self._lock:
                self._rejections.pop(client_key, None)
                # Another replica's robot: its lease holder finds the claim in the shared
                # log (``follow_log``) or store (``adopt``, ``sweep``).
                self._take(command)
            self._journal.append(EventType.ACCEPTED, command, accepted_detail(command))
            self.counters["accepted"] += 1
            return SubmitAnswer(State.ACCEPTED, ACCEPTED, message="accepted and queued")
        if isinstance(outcome, Replay):
            self._note_duplicate(request, "replayed the cached final result")
            record = outcome.record
            return SubmitAnswer(
                record.state,
                record.status_code,
                replayed=True,
                result_json=record.result_json,
                message=outcome.message if record.status_code >= 400 else "",
            )
        if isinstance(outcome, InProgress):
            self._note_duplicate(request, "still in progress")
            with self._lock:
                pending = self._by_client_key.get(client_key)
                dispatched = pending is not None and pending.dispatched
            return SubmitAnswer(
                State.IN_PROGRESS if dispatched else State.ACCEPTED,
                CONFLICT,
                message=outcome.message,
            )
        if isinstance(outcome, Mismatch):
            self.counters["mismatch_rejected"] += 1
            self._append_for(
                EventType.MISMATCH_REJECTED,
                request,
                {"stored": outcome.record.fingerprint, "received": outcome.received_fingerprint},
                discriminator=outcome.received_fingerprint,
            )
            return SubmitAnswer(State.REJECTED, MISMATCH, message=outcome.message)
        assert isinstance(outcome, Expired)
        self.counters["expired_hits"] += 1
        self._append_for(EventType.EXPIRED, request, {"expired_at": outcome.tombstone.expired_at})
        return SubmitAnswer(State.EXPIRED, GONE, message=outcome.message)

    def _validate(self, request: SubmitRequest) -> None:
        if not re.fullmatch(CLIENT_ID_PATTERN, request.client_id):
            raise InvalidCommand("client_id", "must be 1..64 characters of A-Z a-z 0-9 _ . -")
        wait = request.wait_timeout_s
        if not (math.isfinite(wait) and 0.0 <= wait <= MAX_WAIT_TIMEOUT_S):
            raise InvalidCommand(
                "wait_timeout_sec",
                f"must be a number of seconds from 0 to {MAX_WAIT_TIMEOUT_S:g}, got {wait!r}",
            )
        validate_key(request.key)
        robot = self._robots.get(request.robot_id)
        if robot is None:
            known = ", ".join(sorted(self._robots)) or "none"
            raise InvalidCommand("robot_id", f"unknown robot {request.robot_id!r} (fleet: {known})")
        validate_command(
            robot.robot_type,
            request.command_type,
            request.payload_json,
            max_payload_bytes=self.store.config.max_payload_bytes,
            supported=self._capabilities[request.robot_id],
        )

    def _take(self, command: PendingCommand) -> bool:
        """Queue ``command`` if its robot is ours and it is not queued yet (lock held)."""
        client_key = (command.client_id, command.key)
        if client_key in self._by_client_key or not self._dispatcher.holds(command.robot_id):
            return False
        self._by_client_key[client_key] = command
        self._dispatcher.enqueue(command)
        return True

    # --- replicas -------------------------------------------------------------------------
    def adopt(self, robot_id: str, fencing_token: int) -> int:
        """This replica took ``robot_id``'s lease: take over its unfinished commands.

        The shared store is the truth about what is unfinished; the shared log tells which
        were already sent (those are re-sent at once under the new token: the robot answers
        from its store, or runs a command the previous holder never got to it).
        """
        if robot_id not in self._robots:
            return 0
        # Held first: a claim committed after the read below is queued by its own submit
        # (or found in the log), so the store and log are read without holding the lock
        # every submit takes.
        self._dispatcher.hold(robot_id, fencing_token)
        records = [r for r in self.store.in_flight_records() if r.robot_id == robot_id]
        records.sort(key=lambda record: record.created_at)
        found = []
        for record in records:
            command = self._command_from_record(record)
            command.attempt, logged = self._attempts_logged(command)
            found.append((command, logged))
        taken = 0
        with self._lock:
            for command, logged in found:
                if (command.client_id, command.key) in self._by_client_key:
                    continue
                if not logged:
                    # Its accepting replica died before logging it: without this event
                    # the log's replay would never know the key (its result an orphan).
                    self._journal.append(EventType.ACCEPTED, command, accepted_detail(command))
                self._requeue(command)
                taken += 1
        self.counters["adopted"] += taken
        self.counters["leases_acquired"] += 1
        return taken

    def _requeue(self, command: PendingCommand) -> None:
        """Queue an unfinished command found in the store (lock held)."""
        self._by_client_key[(command.client_id, command.key)] = command
        if command.attempt > 0:
            # Sent before (by us before a crash, or by the robot's previous lease holder):
            # in flight, re-sent at once with the same key and the next attempt; the robot
            # answers from its store if it has it.
            self._dispatcher.restore_in_flight(command)
        else:
            self._dispatcher.enqueue(command)

    def _attempts_logged(self, command: PendingCommand) -> tuple[int, bool]:
        """Sends of this claim the log records, and whether the log knows the claim."""
        sent = (EventType.DISPATCHED, EventType.RETRIED)
        events = [
            event
            for event in self.events.events_for(command.client_id, command.key)
            if event.discriminator.startswith(f"{command.claim_id}/")
        ]
        attempts = [int(e.detail.get("attempt", 0)) for e in events if e.event_type in sent]
        logged = any(event.event_type == EventType.ACCEPTED for event in events)
        return max(attempts, default=0), logged

    def abandon(self, robot_id: str) -> None:
        """The lease is lost: stop dispatching to ``robot_id`` at once."""
        if robot_id not in self._robots:
            return
        with self._lock:
            for command in self._dispatcher.let_go(robot_id):
                self._by_client_key.pop((command.client_id, command.key), None)
        self.counters["leases_lost"] += 1

    def follow_log(self, limit: int = 1024) -> int:
        """Queue the commands other replicas accepted for robots this one holds."""
        taken = 0
        events = list(self.events.read(self._followed_sequence, limit))
        for event in events:
            if event.event_type != EventType.ACCEPTED or not self._dispatcher.holds(event.robot_id):
                continue
            found = self.store.check(event.client_id, event.key)
            if isinstance(found, Record) and found.state.is_in_flight:
                with self._lock:
                    taken += self._take(self._command_from_record(found))
        if events:
            self._followed_sequence = events[-1].sequence
        self.counters["followed"] += taken
        return taken

    def sweep(self) -> int:
        """Queue held robots' unfinished claims the log never announced (an accepting
        replica that died between its claim and its event)."""
        taken = 0
        for record in self.store.in_flight_records():
            command = self._command_from_record(record)
            with self._lock:
                if not self._take(command):
                    continue
            taken += 1
            self._journal.append(EventType.ACCEPTED, command, accepted_detail(command))
        self.counters["swept"] += taken
        return taken

    def _note_duplicate(self, request: SubmitRequest, why: str) -> None:
        self.counters["duplicates_suppressed"] += 1
        with self._lock:
            client_key = (request.client_id, request.key)
            count = self._duplicates.pop(client_key, 0) + 1
            self._duplicates[client_key] = count  # now the most recent
            if len(self._duplicates) > DUPLICATE_COUNTS_KEPT:
                self._duplicates.popitem(last=False)
        # Each duplicate submit is its own fact: a unique discriminator, never deduplicated.
        self._append_for(
            EventType.DUPLICATE_SUPPRESSED,
            request,
            {"why": why, "count": count},
            discriminator=uuid.uuid4().hex,
        )

    def progress(self, client_id: str, key: str) -> Progress | None:
        """The command's progress if this orchestrator holds it in flight (None: it does
        not, e.g. final, released, or another replica's robot)."""
        with self._lock:
            command = self._by_client_key.get((client_id, key))
            if command is None:
                return None
            if command.dispatched:
                return Progress(
                    State.IN_PROGRESS,
                    CONFLICT,
                    f"sent to {command.robot_id} (attempt {command.attempt})",
                )
            if command.attempt > 0:
                return Progress(
                    State.ACCEPTED, ACCEPTED, f"queued again: {command.robot_id} asked to wait"
                )
            return Progress(State.ACCEPTED, ACCEPTED, "queued at the orchestrator")

    def withdraw(self, client_id: str, key: str) -> Withdrawal:
        """Withdraw a command its client no longer wants, if it was never sent to its robot:
        taken out of the queue, the key released (a later submit may run it), the refusal
        noted for waiting submits and the status check. A command already sent (even once,
        even refused since with a 503: that send may still reach the robot) is not
        withdrawn; it runs to its end, and the message says why."""
        client_key = (client_id, key)
        with self._lock:
            command = self._by_client_key.get(client_key)
            if command is None or not self._dispatcher.withdraw_unsent(command):
                return Withdrawal(False, self._why_not_withdrawn(command, client_id, key))
            self._by_client_key.pop(client_key, None)
            message = (
                f"withdrawn by its client before it was sent to {command.robot_id}; "
                "nothing ran and the key was released"
            )
            self._rejections[client_key] = (WITHDRAWN, message)
        try:
            self.store.release(client_id, key)
        except (NotClaimed, UnknownKey):
            pass
        except StoreError as error:
            # Still claimed: put it back in its queue, as it was never withdrawn.
            with self._lock:
                self._rejections.pop(client_key, None)
                self._take(command)
            return Withdrawal(
                False, f"the key store cannot release it now ({error}); it stays queued"
            )
        self.counters["withdrawn"] += 1
        detail = {"status_code": WITHDRAWN, "message": message, "withdrawn": True}
        self._journal.emit(
            [self._journal.event(EventType.REJECTED, command, detail, discriminator="withdrawn")]
        )
        return Withdrawal(True, message)

    def _why_not_withdrawn(self, command: PendingCommand | None, client_id: str, key: str) -> str:
        if command is not None:
            return (
                f"not withdrawn: already sent to {command.robot_id} (attempt "
                f"{command.attempt}), so it may be running; it runs to its final result"
            )
        try:
            found = self.store.check(client_id, key)
        except (InvalidRequest, StoreError) as error:
            return f"not withdrawn: {error}"
        if isinstance(found, Record) and found.state.is_final:
            return f"not withdrawn: it already ended {found.state.name}"
        if isinstance(found, Record):
            return "not withdrawn: this orchestrator does not dispatch it (another replica may)"
        return "not withdrawn: no command under this key"

    def final_answer(self, client_id: str, key: str, timeout_s: float) -> SubmitAnswer | None:
        """Wait up to ``timeout_s`` for a final result (or a robot's refusal)."""
        record = self.store.wait_for_final(client_id, key, timeout_s)
        if record is not None and record.state.is_final:
            return SubmitAnswer(record.state, record.status_code, result_json=record.result_json)
        with self._lock:
            rejection = self._rejections.get((client_id, key))
        if record is None and rejection is None and self.replicated:
            rejection = self._logged_rejection(client_id, key)
        if record is None and rejection is not None:
            return SubmitAnswer(State.REJECTED, rejection[0], message=rejection[1])
        return None

    def _logged_rejection(self, client_id: str, key: str) -> tuple[int, str] | None:
        """A refusal another replica (the robot's lease holder) received, from the log."""
        refusals = (EventType.REJECTED, EventType.EXPIRED)
        for event in reversed(self.events.events_for(client_id, key)):
            if event.event_type in refusals:
                detail = event.detail
                return int(detail.get("status_code", BAD_REQUEST)), str(detail.get("message", ""))
            if event.event_type == EventType.ACCEPTED:
                return None
        return None

    # --- dispatch -------------------------------------------------------------------------
    def tick(self) -> list[Delivery]:
        """Deliveries due now, with their events appended: ``dispatch`` then ``flush_events``."""
        deliveries = self.dispatch()
        self.flush_events()
        return deliveries

    def dispatch(self) -> list[Delivery]:
        """Deliveries due now: first dispatches and retries, within each robot's capacity.

        Their events are deferred: a caller that sends first and then calls
        ``flush_events`` keeps the log's commit off the path to the robot (a DISPATCHED
        lost in a crash only means a re-send, which the robot answers from its store).
        """
        due, changes = self._dispatcher.due()
        events: list[FleetEventRecord] = []
        for change in changes:
            event = EventType.ROBOT_ONLINE if change.online else EventType.ROBOT_OFFLINE
            self.counters[event.value] += 1
            events.append(
                FleetEventRecord(
                    event_type=event,
                    client_id="",
                    key="",
                    robot_id=change.robot_id,
                    detail={
                        "in_flight": change.in_flight,
                        "queued": change.queued,
                        "restarted": change.restarted,
                    },
                    stamp=self._wall_clock(),
                    discriminator=uuid.uuid4().hex,
                )
            )
        deliveries = []
        for item in due:
            command = item.command
            token = item.fencing_token
            if self.lease_token is not None and self.lease_token(command.robot_id) != token:
                # The lease ran out since the keeper's last step: send nothing; the
                # keeper's ``abandon`` follows.
                self.counters["sends_withheld_no_lease"] += 1
                continue
            kind = EventType.RETRIED if item.is_retry else EventType.DISPATCHED
            detail: dict[str, Any] = {"attempt": command.attempt}
            if item.reason is not None:
                detail["why"] = item.reason.value
                self.counters[f"retries_{item.reason.value}"] += 1
            self.counters["retries" if item.is_retry else "dispatched"] += 1
            events.append(
                self._journal.event(kind, command, detail, discriminator=str(command.attempt))
            )
            delivery = Delivery(
                key=command.robot_key,
                client_id=command.client_id,
                robot_id=command.robot_id,
                command_type=command.command_type,
                payload_json=command.payload_json,
                payload_sha256=command.fingerprint,
                attempt=command.attempt,
                fencing_token=token,
            )
            if self.signer is not None:
                key_id, tag = self.signer.sign(delivery)
                delivery = dataclasses.replace(delivery, auth_key_id=key_id, auth_tag=tag)
            deliveries.append(delivery)
        self._journal.defer(events)
        return deliveries

    def flush_events(self) -> None:
        """Append every deferred event in one durable commit (and publish them)."""
        self._journal.flush()

    def next_deadline(self) -> float | None:
        """The clock time (``clock``) at which ``dispatch`` next has work without new input."""
        return self._dispatcher.next_deadline()

    def on_status(
        self,
        robot_id: str,
        queue_depth: int,
        capacity: int,
        *,
        heard_on: str | None = None,
        boot_id: str = "",
        last_finished_key: str = "",
        ready: bool = True,
    ) -> bool:
        """A robot's load. ``heard_on``: the robot whose status topic carried it;
        ``boot_id``: its process's (a new one re-sends what it had in flight);
        ``ready``: whether its backend can take commands (nothing is dispatched until so);
        ``last_finished_key``: the robot-side key it last answered (an idle robot's tells
        of a lost answer). True when dispatch may have work now (False for a heartbeat
        that changes nothing)."""
        if heard_on is not None and robot_id != heard_on:
            self.counters["status_wrong_topic"] += 1
            return False
        if not (
            0 < capacity <= MAX_ROBOT_CAPACITY
            and 0 <= queue_depth <= MAX_ROBOT_CAPACITY
            and len(boot_id) <= MAX_BOOT_ID_LENGTH
            and len(last_finished_key) <= MAX_TOKEN_LENGTH
        ):
            self.counters["status_invalid"] += 1
            return False
        effect = self._dispatcher.on_status(
            robot_id, queue_depth, capacity, boot_id, last_finished_key, ready
        )
        if effect is StatusEffect.UNKNOWN_ROBOT:
            self.counters["status_unknown_robot"] += 1
        return effect is StatusEffect.WAKE

    def on_liveliness(self, robot_id: str, alive: bool) -> bool:
        """Whether the robot's process is there, as DDS tells; True when dispatch may have
        work now (a robot back: what it had in flight is re-sent)."""
        effect = self._dispatcher.on_liveliness(robot_id, alive)
        if effect is StatusEffect.UNKNOWN_ROBOT:
            self.counters["status_unknown_robot"] += 1
        return effect is StatusEffect.WAKE

    # --- results --------------------------------------------------------------------------
    def on_result(self, answer: Answer) -> None:
        effect, command = self._dispatcher.on_result(answer)
        if effect is ResultEffect.IGNORED:
            self.counters["results_ignored"] += 1
        elif effect is ResultEffect.UNEXPECTED:
            self.counters["results_unexpected"] += 1
        elif effect in (ResultEffect.SETTLED, ResultEffect.REQUEUED) and command is not None:
            self._settle(command, answer)

    def _settle(self, command: PendingCommand, answer: Answer) -> None:
        client_key = (command.client_id, command.key)
        if answer.state in FINAL_STATES:
            try:
                record = self.store.finish(
                    command.client_id,
                    command.key,
                    state=answer.state,
                    status_code=answer.status_code,
                    result_json=answer.result_json,
                )
            except (NotClaimed, UnknownKey, FinalResultConflict) as error:
                # Final or gone already (another holder settled it, or its retention
                # ended): nothing left to wait for.
                self.counters["finish_errors"] += 1
                self._journal.append(
                    EventType.RESULT_IGNORED,
                    command,
                    {"error": str(error), "state": int(answer.state)},
                    discriminator=f"finish-error/{command.attempt}",
                )
                self._forget(client_key)
                return
            except StoreError:
                # The database is down or the store is full: the outcome must not be
                # lost, and the robot keeps it, so the command goes back in flight and its
                # re-send fetches the same answer again once the store takes writes.
                self.counters["finish_deferred"] += 1
                self._resend_later(command)
                return
            kind = EventType.INTERRUPTED if answer.state == State.INTERRUPTED else EventType.RESULT
            detail = settled_detail(
                record, answered_attempt=answer.attempt, attempts=command.attempt
            )
            self._journal.append(kind, command, detail)
            self.counters[f"final_{answer.state.name.lower()}"] += 1
            self._forget(client_key)
            return
        if answer.status_code in RETRY_LATER:
            self.counters["robot_busy"] += 1
            self._journal.append(
                EventType.BUSY,
                command,
                {"status_code": answer.status_code},
                discriminator=str(command.attempt),
            )
            return
        # Refused before any side effect (or forgotten by the robot): release our claim
        # too, so that the client may fix the command or retry it. The refusal is noted
        # first: the release wakes the submits waiting on this key, and they read it.
        with self._lock:
            self._rejections[client_key] = (answer.status_code, answer.message)
        try:
            self.store.release(command.client_id, command.key)
        except (NotClaimed, UnknownKey):
            pass
        except StoreError:
            # Still claimed: a re-send is refused again, and released then.
            with self._lock:
                self._rejections.pop(client_key, None)
            self.counters["release_deferred"] += 1
            self._resend_later(command)
            return
        self._forget(client_key)
        kind = EventType.EXPIRED if answer.status_code == GONE else EventType.REJECTED
        self.counters[f"robot_{kind.value}"] += 1
        # At once: restore could not tell a released key's end from the log alone.
        detail = {"status_code": answer.status_code, "message": answer.message}
        self._journal.emit(
            [self._journal.event(kind, command, detail, discriminator=str(command.attempt))]
        )

    def _forget(self, client_key: tuple[str, str]) -> None:
        with self._lock:
            self._by_client_key.pop(client_key, None)

    def _resend_later(self, command: PendingCommand) -> None:
        if not self._dispatcher.resend_later(command):
            # The lease went meanwhile: the claim stays in the shared store for the next
            # holder to adopt.
            self._forget((command.client_id, command.key))

    # --- status check ---------------------------------------------------------------------
    def check_key(self, client_id: str, key: str) -> tuple[KeyStatus, tuple[str, str] | None]:
        """The orchestrator's view of a key, and the robot to ask when it is not final."""
        try:
            found = self.store.check(client_id, key)
        except InvalidRequest as invalid:
            return KeyStatus(
                found=False, state=State.UNKNOWN, status_code=BAD_REQUEST, message=str(invalid)
            ), None
        status = key_status(found, key, expired_key_policy=self.store.config.expired_key_policy)
        if isinstance(found, Record) and found.state.is_in_flight:
            with self._lock:
                command = self._by_client_key.get((client_id, key))
                dispatched = command is not None and command.dispatched
            if dispatched and command is not None:
                return status, (command.robot_id, command.robot_key)
            return status, None
        if found is None:
            with self._lock:
                rejection = self._rejections.get((client_id, key))
            if rejection is not None and rejection[0] == WITHDRAWN:
                return KeyStatus(
                    found=False, state=State.REJECTED, status_code=WITHDRAWN, message=rejection[1]
                ), None
            if rejection is not None:
                return KeyStatus(
                    found=False,
                    state=State.REJECTED,
                    status_code=rejection[0],
                    message=f"the robot refused it before acting: {rejection[1]}; "
                    "the key was released",
                ), None
        return status, None

    # --- introspection --------------------------------------------------------------------
    def load(self) -> dict[str, dict[str, Any]]:
        return dict(self._dispatcher.load())

    def pending(self) -> int:
        return self._dispatcher.pending()

    # --- events ---------------------------------------------------------------------------
    def _append_for(
        self,
        kind: EventType,
        request: SubmitRequest,
        detail: dict[str, Any],
        discriminator: str = "",
    ) -> None:
        self._journal.append_fact(
            kind,
            client_id=request.client_id,
            key=request.key,
            robot_id=request.robot_id,
            detail=detail,
            discriminator=discriminator,
        )
