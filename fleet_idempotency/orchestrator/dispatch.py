"""Dispatch and retry scheduling: which queued or in-flight command goes to which robot when.

No store and no event log here: this is the in-memory side of the orchestrator, one lane
per robot (its queue, what it has in flight, whether it is online, its advertised
capacity). ``OrchestratorCore`` decides what a submit or a result *means*; the
``Dispatcher`` only decides when deliveries are due. One lock guards every lane; callers
never hold it while they write to disk.

Event-driven, and O(work) per call: a submit, a result or a status marks its lane
*dirty*, and ``due()`` fills free slots of the dirty lanes only; everything that happens
at a time (a retry deadline, a robot going silent, the end of a busy pause) sits in one
heap, and ``next_deadline()`` tells the caller how long it may sleep. Nothing scans the
fleet or every command in flight; entries made stale by a result are skipped when they
surface.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
import random
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from fleet_idempotency.protocol import ACCEPTED, CONFLICT, GONE, RETRY_LATER, Answer
from fleet_idempotency.store import State
from fleet_idempotency.store.keys import MAX_TOKEN_LENGTH

FINAL_STATES = (State.COMPLETED, State.FAILED, State.INTERRUPTED)
# How far re-sends stretch a lane's first re-send (retry_max_s caps it anyway).
MAX_RESEND_BACKOFF = 64.0
# An idle robot's status names the last command it finished; if that command's answer has
# not come, it is re-sent once it is later than answers after such a status have been
# (``RobotLane.answer_lag``), and never sooner than this. The answer was published
# before the status, so it normally arrives first (the re-send is then skipped).
LOST_ANSWER_GRACE_S = 0.02


class OrchestratorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    queue_capacity_per_robot: int = Field(default=256, ge=1)
    # The first re-send of an unanswered command: ``retry_initial_s`` until the robot's
    # answer time is measured, then that time plus four deviations, never below
    # ``retry_min_s`` (RFC 6298's initial and minimum retransmission timeouts). The floor
    # stays above the robots' 202 delay (``ack_delay_s``, 0.05 s), or every held 202 would
    # draw a re-send; above it, a lost answer costs ~0.1 s, not the initial 0.5 s.
    retry_initial_s: float = Field(default=0.5, gt=0)
    retry_min_s: float = Field(default=0.1, gt=0)
    retry_max_s: float = Field(default=5.0, gt=0)
    retry_jitter: float = Field(default=0.2, ge=0, le=1)
    # A command the robot acknowledged (202/409) is re-sent once the robot's status shows
    # it holds fewer commands than it acknowledged (a final result was lost), else only
    # after this long: the last resort when its statuses cannot tell (commands from other
    # senders in its queue).
    acknowledged_resend_s: float = Field(default=30.0, gt=0)
    # Sends a robot has not answered yet (not even with 202); further commands wait in
    # the orchestrator's queue. The robot's answers pace dispatch, as acknowledgements
    # pace a TCP sender: without it a host of 25 robots got up to 16 commands each at
    # once, took seconds to answer the last, and each late answer drew re-sends that
    # deepened its backlog.
    unanswered_per_robot: int = Field(default=2, ge=1)
    # A robot whose status has not been heard for this long is offline: no dispatch and
    # no retries to it until it is heard again.
    offline_after_s: float = Field(default=30.0, gt=0)
    # After a 429 from a robot, wait at least this long before dispatching to it again,
    # even if a status claims room (statuses and results may cross on the wire).
    busy_pause_s: float = Field(default=0.5, ge=0)


def robot_key(client_id: str, key: str) -> str:
    """The key a robot sees: unique per (client, key), since a robot's scope is itself.

    Readable when it fits the 128-character key limit; otherwise the client key is
    replaced by its SHA-256, which keeps the mapping deterministic across restarts.
    """
    readable = f"{client_id}:{key}"
    if len(readable) <= MAX_TOKEN_LENGTH:
        return readable
    return f"{client_id}:#{hashlib.sha256(key.encode()).hexdigest()}"


class ResendReason(Enum):
    """Why a command in flight is sent again (the ``why`` of its retried event): what
    tells a needless re-send (an answer that was only late) from a needed one."""

    UNANSWERED = "unanswered"  # no answer within the robot's answer time (backoff)
    ACKNOWLEDGED = "acknowledged"  # the robot held it (202) for acknowledged_resend_s
    LOST_ANSWER = "lost_answer"  # an idle robot named it finished, its answer overdue
    LOST_RESULT = "lost_result"  # the robot holds fewer than it acknowledged to us
    ROBOT_BACK = "robot_back"  # the robot came back or restarted: all it had, at once
    RESTORED = "restored"  # in flight when this orchestrator (re)started
    NOT_STORED = "not_stored"  # its outcome could not be stored: asked for it again


@dataclass
class PendingCommand:
    """One accepted command between its acceptance and its final result."""

    client_id: str
    key: str
    robot_id: str
    command_type: str
    payload_json: str
    fingerprint: str
    robot_key: str
    # Distinguishes successive claims of one key (a key released after a robot's refusal
    # may be claimed again): part of every event identity, so the log keeps both lives.
    claim_id: str
    attempt: int = 0
    dispatched: bool = False
    acknowledged: bool = False
    next_send_at: float = 0.0
    backoff_s: float = 0.0
    sent_at: float = 0.0  # when ``attempt`` went out
    # When an idle robot named it as finished while we still waited for its answer, and
    # our latest send then (0: not named). It is fetched for that once: a second loss
    # waits for the backoff like any other.
    named_finished_at: float = 0.0
    named_at_attempt: int = 0
    # Why its next re-send, if it comes, is made: the retried event says so.
    resend_reason: ResendReason = ResendReason.UNANSWERED


@dataclass
class SmoothedTime:
    """A duration's smoothed mean and mean deviation, as TCP's retransmission timer keeps
    them (RFC 6298): ``bound_s`` is what a sample rarely exceeds."""

    mean_s: float | None = None
    deviation_s: float = 0.0

    def note(self, sample_s: float) -> None:
        if self.mean_s is None:
            self.mean_s, self.deviation_s = sample_s, sample_s / 2
            return
        self.deviation_s = 0.75 * self.deviation_s + 0.25 * abs(self.mean_s - sample_s)
        self.mean_s = 0.875 * self.mean_s + 0.125 * sample_s

    def bound_s(self) -> float | None:
        return None if self.mean_s is None else self.mean_s + 4 * self.deviation_s


@dataclass
class RobotLane:
    robot_id: str
    robot_type: str
    capacity: int
    queue: deque[PendingCommand] = field(default_factory=deque)
    in_flight: dict[str, PendingCommand] = field(default_factory=dict)  # by robot-side key
    last_heard: float | None = None
    online: bool = False
    paused_until: float = 0.0
    # An offline check is scheduled for this lane (one at a time, however many statuses).
    offline_check_pending: bool = False
    # The robot process's boot id, from its statuses ("" until one names it): a new one
    # means the process restarted, and whatever it had not answered was lost with it.
    boot_id: str = ""
    # The robot's backend can take commands (its statuses say; until then it would refuse
    # each with 503, so nothing is dispatched to it).
    ready: bool = True
    # Replicas: only the holder of the robot's lease dispatches to it, and every delivery
    # carries the lease's fencing token. A lone orchestrator holds every lane, token 0.
    held: bool = True
    fencing_token: int = 0
    # How long the robot takes to answer a send: under load it answers late, and a
    # re-send before then only adds to its backlog.
    answer_time: SmoothedTime = field(default_factory=SmoothedTime)
    # How long after an idle status naming a command its answer still arrives (0 when it
    # came first). Statuses and answers are taken on different threads, and under load
    # the answers' one fell ~0.5 s behind: an answer that late is not lost.
    answer_lag: SmoothedTime = field(default_factory=SmoothedTime)
    last_named_key: str = ""
    # Doubled by each re-send of an unanswered command, back to 1 with the next timed
    # answer (RFC 6298 5.5-5.7, Karn's algorithm). Without it an estimate below what a
    # loaded robot now takes never recovered: every send was re-sent before its answer
    # came, so no answer timed a send (1.3-1.6 re-sends per command at 64 outstanding).
    resend_backoff: float = 1.0

    def first_resend_after(self, settings: OrchestratorSettings) -> float:
        """When to re-send a command that got no answer: the configured first backoff
        until this robot's answer time is known, then as long as its answers take
        (within the floor and the longest backoff)."""
        expected = self.answer_time.bound_s()
        if expected is None:
            return settings.retry_initial_s
        floored = max(settings.retry_min_s, expected) * self.resend_backoff
        return min(settings.retry_max_s, floored)

    def note_answer_time(self, sample_s: float) -> None:
        self.resend_backoff = 1.0
        self.answer_time.note(sample_s)

    @property
    def waiting(self) -> int:
        return len(self.queue) + len(self.in_flight)


@dataclass(frozen=True)
class Due:
    """A delivery that is due now: a first dispatch, or a re-send of one in flight."""

    command: PendingCommand
    is_retry: bool
    # The lane's lease token when it became due (0 for a lone orchestrator).
    fencing_token: int = 0
    reason: ResendReason | None = None  # a re-send's


class ResultEffect(Enum):
    """What a robot's answer does to the command it answers."""

    IGNORED = "not in flight (late, duplicate, or for a key never sent)"
    ACKNOWLEDGED = "the robot has it (202/409): keep waiting"
    REQUEUED = "robot busy or its store full: back to the head of the queue"
    SETTLED = "final, or refused before any side effect: the command leaves the lane"
    UNEXPECTED = "an answer this orchestrator does not understand"


@dataclass(frozen=True)
class OnlineChange:
    robot_id: str
    online: bool
    in_flight: int
    queued: int
    # Back with a new boot id, whether or not it had been silent long enough to be
    # marked offline.
    restarted: bool = False


# Heap entry kinds: what to look at when the entry's time comes.
_RETRY, _OFFLINE_CHECK, _UNPAUSE = 0, 1, 2
# Offline checks are rounded up to a grid of this fraction of ``offline_after_s``, so that
# the checks of a whole fleet share a few wake-ups (two a second at the default 3 s)
# instead of one per robot and period; a silent robot is noticed up to that much later.
OFFLINE_CHECK_GRID = 1 / 6


class StatusEffect(Enum):
    UNKNOWN_ROBOT = "unknown_robot"
    NOTED = "noted"  # a heartbeat: nothing for a dispatch round to do
    WAKE = "wake"  # the robot came back, changed its capacity, or can end a busy pause


class Dispatcher:
    def __init__(
        self,
        lanes: dict[str, RobotLane],
        settings: OrchestratorSettings,
        *,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self.settings = settings
        self.lanes = lanes
        self._clock = clock
        self._rng = rng
        self._lock = threading.RLock()
        self._dirty: set[str] = set()
        # (when, tie-breaker, kind, robot_id, robot_key or ""): retries, offline checks,
        # ends of busy pauses.
        self._timed: list[tuple[float, int, int, str, str]] = []
        self._order = itertools.count()
        # Robots that came back, noticed by a status or result between two ``due()`` calls.
        self._changes: list[OnlineChange] = []

    def _at(self, when: float, kind: int, robot_id: str, robot_key: str = "") -> None:
        heapq.heappush(self._timed, (when, next(self._order), kind, robot_id, robot_key))

    def enqueue(self, command: PendingCommand) -> None:
        with self._lock:
            self.lanes[command.robot_id].queue.append(command)
            self._dirty.add(command.robot_id)

    def withdraw_unsent(self, command: PendingCommand) -> bool:
        """Take ``command`` out of its robot's queue if it was never sent (a send, even one
        the robot refused with 503, may still be on its way to the robot). True if so."""
        with self._lock:
            lane = self.lanes[command.robot_id]
            if command.attempt > 0 or command.dispatched:
                return False
            for index, queued in enumerate(lane.queue):
                if queued is command:
                    del lane.queue[index]
                    return True
            return False

    def restore_in_flight(self, command: PendingCommand) -> None:
        """A command sent before a crash: in flight, re-sent as soon as its robot is heard."""
        with self._lock:
            command.dispatched = True
            command.next_send_at = 0.0
            command.resend_reason = ResendReason.RESTORED
            self.lanes[command.robot_id].in_flight[command.robot_key] = command
            self._at(0.0, _RETRY, command.robot_id, command.robot_key)

    def resend_later(self, command: PendingCommand) -> bool:
        """A settled command whose outcome could not be stored: back in flight, re-sent at
        its next backoff (the robot answers the re-send from its store). False when its
        lane is no longer ours: the next lease holder adopts it from the shared store."""
        with self._lock:
            lane = self.lanes[command.robot_id]
            if not lane.held:
                return False
            command.dispatched = True
            lane.in_flight[command.robot_key] = command
            self._schedule(lane, command, self._clock(), reason=ResendReason.NOT_STORED)
            return True

    def hold(self, robot_id: str, fencing_token: int) -> None:
        """This replica took the robot's lease: dispatch to it under ``fencing_token``."""
        with self._lock:
            lane = self.lanes[robot_id]
            lane.held = True
            lane.fencing_token = fencing_token
            self._dirty.add(robot_id)

    def let_go(self, robot_id: str) -> list[PendingCommand]:
        """The lease is gone: stop dispatching and forget the lane's commands (they stay in
        the shared store for the next holder); returns what was forgotten."""
        with self._lock:
            lane = self.lanes[robot_id]
            lane.held = False
            dropped = [*lane.queue, *lane.in_flight.values()]
            lane.queue.clear()
            lane.in_flight.clear()
            return dropped

    def holds(self, robot_id: str) -> bool:
        with self._lock:
            lane = self.lanes.get(robot_id)
            return lane is not None and lane.held

    def queue_full(self, robot_id: str) -> bool:
        with self._lock:
            waiting = self.lanes[robot_id].waiting
        return waiting >= self.settings.queue_capacity_per_robot

    def next_deadline(self) -> float | None:
        """When ``due()`` may have something to do without any new input (None: never)."""
        with self._lock:
            if self._dirty:
                return self._clock()
            return self._timed[0][0] if self._timed else None

    def due(self) -> tuple[list[Due], list[OnlineChange]]:
        """Deliveries due now, within each robot's capacity, and robots that came or went."""
        now = self._clock()
        due: list[Due] = []
        with self._lock:
            changes, self._changes = self._changes, []
            while self._timed and self._timed[0][0] <= now:
                _when, _order, kind, robot_id, robot_key = heapq.heappop(self._timed)
                lane = self.lanes[robot_id]
                if kind == _OFFLINE_CHECK:
                    lane.offline_check_pending = False
                    change = self._check_offline(lane, now)
                    if change is not None:
                        changes.append(change)
                elif kind == _UNPAUSE:
                    self._dirty.add(robot_id)
                else:
                    command = lane.in_flight.get(robot_key)
                    # Stale (answered, or rescheduled since) or offline: nothing to send;
                    # an offline lane's commands are rescheduled when it is heard again.
                    if (
                        command is None
                        or not (lane.online and lane.held)
                        or command.next_send_at > now
                    ):
                        continue
                    due.append(Due(command, True, lane.fencing_token, command.resend_reason))
                    # A timed-out send stretches the lane's first re-send; one made because
                    # the robot is back or restarted (backoff reset to 0) does not.
                    if not command.acknowledged and command.backoff_s > 0:
                        lane.resend_backoff = min(lane.resend_backoff * 2, MAX_RESEND_BACKOFF)
                    self._schedule(lane, command, now)
            dirty, self._dirty = self._dirty, set()
            for robot_id in dirty:
                lane = self.lanes[robot_id]
                if not (lane.online and lane.held and lane.ready):
                    continue
                unanswered = sum(1 for c in lane.in_flight.values() if not c.acknowledged)
                while (
                    lane.queue
                    and len(lane.in_flight) < lane.capacity
                    and unanswered < self.settings.unanswered_per_robot
                    and lane.paused_until <= now
                ):
                    unanswered += 1
                    command = lane.queue.popleft()
                    command.dispatched = True
                    lane.in_flight[command.robot_key] = command
                    due.append(Due(command, False, lane.fencing_token))
                    self._schedule(lane, command, now)
            for item in due:
                item.command.attempt += 1
                item.command.sent_at = now
        return due, changes

    def _schedule(
        self,
        lane: RobotLane,
        command: PendingCommand,
        now: float,
        backoff_s: float | None = None,
        reason: ResendReason = ResendReason.UNANSWERED,
    ) -> None:
        """The command's next re-send: after ``backoff_s``, or the next step of its
        exponential backoff (a deadline set before is superseded: ``due`` skips it)."""
        command.resend_reason = reason
        if backoff_s is not None:
            base = backoff_s
        elif command.backoff_s == 0:
            base = lane.first_resend_after(self.settings)
        else:
            base = min(command.backoff_s * 2, self.settings.retry_max_s)
        command.backoff_s = base
        jitter = 1 + self.settings.retry_jitter * (2 * self._rng.random() - 1)
        command.next_send_at = now + base * jitter
        self._at(command.next_send_at, _RETRY, command.robot_id, command.robot_key)

    def _check_offline(self, lane: RobotLane, now: float) -> OnlineChange | None:
        assert lane.last_heard is not None
        silent_until = lane.last_heard + self.settings.offline_after_s
        if now < silent_until:
            lane.offline_check_pending = True
            self._at(self._on_grid(silent_until), _OFFLINE_CHECK, lane.robot_id)
            return None
        if not lane.online:
            return None
        lane.online = False
        return OnlineChange(lane.robot_id, False, len(lane.in_flight), len(lane.queue))

    def _on_grid(self, when: float) -> float:
        grid = self.settings.offline_after_s * OFFLINE_CHECK_GRID
        return math.ceil(when / grid) * grid

    def _heard(self, lane: RobotLane, boot_id: str = "") -> OnlineChange | None:
        """A sign of life (status or result): back online at once, offline check armed.
        ``boot_id``: the robot process's, from a status (results carry none)."""
        now = self._clock()
        lane.last_heard = now
        if not lane.offline_check_pending:
            lane.offline_check_pending = True
            self._at(
                self._on_grid(now + self.settings.offline_after_s), _OFFLINE_CHECK, lane.robot_id
            )
        restarted = bool(boot_id) and lane.boot_id not in ("", boot_id)
        if boot_id:
            lane.boot_id = boot_id
        if lane.online and not restarted:
            return None
        lane.online = True
        self._dirty.add(lane.robot_id)
        # Back, or restarted within offline_after_s: re-send what was in flight at once
        # rather than after a backoff that grew while nothing could answer (a robot host
        # restarts in ~3 s, by when the next re-send was up to 3 s away). The re-sends that
        # went unanswered meanwhile said nothing about how fast the robot answers.
        lane.resend_backoff = 1.0
        for command in lane.in_flight.values():
            command.next_send_at = now
            command.backoff_s = 0.0
            if command.resend_reason is not ResendReason.RESTORED:
                command.resend_reason = ResendReason.ROBOT_BACK
            self._at(now, _RETRY, lane.robot_id, command.robot_key)
        return OnlineChange(
            lane.robot_id, True, len(lane.in_flight), len(lane.queue), restarted=restarted
        )

    def on_status(  # noqa: PLR0917 - a status's fields, in the message's order
        self,
        robot_id: str,
        queue_depth: int,
        capacity: int,
        boot_id: str = "",
        last_finished_key: str = "",
        ready: bool = True,
    ) -> StatusEffect:
        """Note a robot's load, and say whether a dispatch round may now have work (most
        statuses are heartbeats that change nothing: no need to wake the dispatcher)."""
        with self._lock:
            lane = self.lanes.get(robot_id)
            if lane is None:
                return StatusEffect.UNKNOWN_ROBOT
            effect = StatusEffect.NOTED
            change = self._heard(lane, boot_id)
            if change is not None:
                self._changes.append(change)
                effect = StatusEffect.WAKE
            if capacity > 0 and capacity != lane.capacity:
                lane.capacity = capacity
                self._dirty.add(robot_id)
                effect = StatusEffect.WAKE
            if ready != lane.ready:
                lane.ready = ready
                if ready:
                    self._dirty.add(robot_id)
                    effect = StatusEffect.WAKE
            if queue_depth == 0 and self._fetch_lost_answer(lane, last_finished_key):
                effect = StatusEffect.WAKE
            if self._pull_in_lost_results(lane, queue_depth):
                effect = StatusEffect.WAKE
            assert lane.last_heard is not None
            if queue_depth < capacity and lane.paused_until > lane.last_heard:
                lane.paused_until = min(
                    lane.paused_until, lane.last_heard + self.settings.busy_pause_s
                )
                self._at(lane.paused_until, _UNPAUSE, robot_id)
                effect = StatusEffect.WAKE
            return effect

    def on_liveliness(self, robot_id: str, alive: bool) -> StatusEffect:
        """DDS says whether the robot's process is there (its status publisher's liveliness,
        ros/qos.py). Gone: offline now, not after ``offline_after_s`` of silence (an idle
        robot sends a status only every ``idle_status_period_s``). Back: heard."""
        with self._lock:
            lane = self.lanes.get(robot_id)
            if lane is None:
                return StatusEffect.UNKNOWN_ROBOT
            change: OnlineChange | None
            if alive:
                change = self._heard(lane)
            elif lane.online:
                lane.online = False
                change = OnlineChange(lane.robot_id, False, len(lane.in_flight), len(lane.queue))
            else:
                change = None
            if change is None:
                return StatusEffect.NOTED
            self._changes.append(change)
            return StatusEffect.WAKE

    def _fetch_lost_answer(self, lane: RobotLane, last_finished_key: str) -> bool:
        """The robot is idle and finished ``last_finished_key``: if we still wait for its
        answer, that answer was lost, or is still on its way or queued on our side. Re-send
        it once answers are overdue by the lane's lag, instead of at its next backoff: the
        robot answers from its store. The re-send is prompted by evidence, not a timeout,
        so (backoff 0) it stretches nothing."""
        newly_named = last_finished_key != lane.last_named_key
        lane.last_named_key = last_finished_key
        command = lane.in_flight.get(last_finished_key) if last_finished_key else None
        if command is None:
            if newly_named and last_finished_key:
                lane.answer_lag.note(0.0)  # its answer came before the status
            return False
        if command.named_finished_at:
            return False
        now = self._clock()
        command.named_finished_at, command.named_at_attempt = now, command.attempt
        due_at = now + max(LOST_ANSWER_GRACE_S, lane.answer_lag.bound_s() or 0.0)
        return self._bring_re_send_forward(
            lane, command, due_at, backoff_s=0.0, reason=ResendReason.LOST_ANSWER
        )

    def _pull_in_lost_results(self, lane: RobotLane, queue_depth: int) -> bool:
        """A robot that holds fewer commands than it acknowledged to us finished some whose
        results we have not seen: lost, or still on their way. It runs them in order, so
        those are the oldest; their re-sends move up to when an answer would be due, which
        a result on its way beats (the re-send is then skipped)."""
        acknowledged = [c for c in lane.in_flight.values() if c.acknowledged]
        surplus = len(acknowledged) - queue_depth
        if surplus <= 0:
            return False
        wait_s = lane.first_resend_after(self.settings)
        due_at = self._clock() + wait_s
        pulled_in = False
        for command in acknowledged[:surplus]:
            # Its backoff restarts from this wait: left at the acknowledgement's 30 s, a
            # lost answer to this re-send cost retry_max_s (5 s) before the next.
            if self._bring_re_send_forward(
                lane, command, due_at, backoff_s=wait_s, reason=ResendReason.LOST_RESULT
            ):
                pulled_in = True
        return pulled_in

    def _bring_re_send_forward(
        self,
        lane: RobotLane,
        command: PendingCommand,
        due_at: float,
        *,
        backoff_s: float,
        reason: ResendReason,
    ) -> bool:
        """Re-send ``command`` at ``due_at`` if it was due later (False: it was not), its
        backoff restarting from ``backoff_s``."""
        if command.next_send_at <= due_at:
            return False
        command.next_send_at = due_at
        command.backoff_s = backoff_s
        command.resend_reason = reason
        command.acknowledged = False  # the re-send's answer acknowledges it again
        self._at(due_at, _RETRY, lane.robot_id, command.robot_key)
        return True

    def on_result(self, answer: Answer) -> tuple[ResultEffect, PendingCommand | None]:
        with self._lock:
            lane = self.lanes.get(answer.robot_id)
            command = lane.in_flight.get(answer.key) if lane is not None else None
            if lane is not None:
                change = self._heard(lane)
                if change is not None:
                    self._changes.append(change)
            if command is None or lane is None:
                return ResultEffect.IGNORED, None
            if command.named_finished_at > 0 and answer.attempt <= command.named_at_attempt:
                # An answer to a send made before the robot said it had finished: it was
                # late, not lost (the fetch's own answer says nothing about lateness).
                lane.answer_lag.note(self._clock() - command.named_finished_at)
                command.named_finished_at = -1.0  # one sample per command, fetched once
            if answer.attempt == command.attempt and command.sent_at:
                # An answer to the latest send (not to an earlier one: Karn's rule).
                lane.note_answer_time(self._clock() - command.sent_at)
                command.sent_at = 0.0  # one sample per send
            if answer.state in FINAL_STATES:
                del lane.in_flight[answer.key]
                self._dirty.add(lane.robot_id)
                return ResultEffect.SETTLED, command
            if answer.status_code in RETRY_LATER:
                del lane.in_flight[answer.key]
                command.dispatched = False
                command.backoff_s = 0.0
                lane.queue.appendleft(command)
                lane.paused_until = self._clock() + self.settings.busy_pause_s
                self._at(lane.paused_until, _UNPAUSE, lane.robot_id)
                return ResultEffect.REQUEUED, command
            if answer.state == State.REJECTED or answer.status_code == GONE:
                del lane.in_flight[answer.key]
                self._dirty.add(lane.robot_id)
                return ResultEffect.SETTLED, command
            if answer.status_code in (ACCEPTED, CONFLICT):
                command.acknowledged = True
                self._dirty.add(lane.robot_id)  # room for the next command
                # The robot holds the command durably and works through its queue: a
                # re-send could only fetch a final result lost on the way back, and the
                # robot's statuses tell when that happened (``_pull_in_lost_results``).
                # Re-sending on the retry schedule cost two re-sends per command under
                # load (robots with 16 queued commands take seconds to reach the last),
                # each a message, a store read and an answer.
                self._schedule(
                    lane,
                    command,
                    self._clock(),
                    self.settings.acknowledged_resend_s,
                    reason=ResendReason.ACKNOWLEDGED,
                )
                return ResultEffect.ACKNOWLEDGED, command
            return ResultEffect.UNEXPECTED, command

    def load(self) -> dict[str, dict[str, int | bool]]:
        with self._lock:
            return {
                lane.robot_id: {
                    "queued": len(lane.queue),
                    "in_flight": len(lane.in_flight),
                    "online": lane.online,
                    "capacity": lane.capacity,
                }
                for lane in self.lanes.values()
            }

    def pending(self) -> int:
        with self._lock:
            return sum(lane.waiting for lane in self.lanes.values())
