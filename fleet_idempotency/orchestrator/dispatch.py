"""Dispatch and retry scheduling: which queued or in-flight command goes to which robot when.

No store and no event log here: this is the in-memory side of the orchestrator, one lane
per robot (its queue, what it has in flight, whether it is online, its advertised
capacity). ``OrchestratorCore`` decides what a submit or a result *means*; the
``Dispatcher`` only decides when deliveries are due. One lock guards every lane; callers
never hold it while they write to disk.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from fleet_idempotency.protocol import ACCEPTED, BUSY, CONFLICT, GONE, STORE_FULL, Answer
from fleet_idempotency.store import State
from fleet_idempotency.store.keys import MAX_TOKEN_LENGTH

FINAL_STATES = (State.COMPLETED, State.FAILED, State.INTERRUPTED)


class OrchestratorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    queue_capacity_per_robot: int = Field(default=256, ge=1)
    retry_initial_s: float = Field(default=0.5, gt=0)
    retry_max_s: float = Field(default=5.0, gt=0)
    retry_jitter: float = Field(default=0.2, ge=0, le=1)
    # A robot whose status has not been heard for this long is offline: no dispatch and
    # no retries to it until it is heard again.
    offline_after_s: float = Field(default=3.0, gt=0)
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

    @property
    def waiting(self) -> int:
        return len(self.queue) + len(self.in_flight)


@dataclass(frozen=True)
class Due:
    """A delivery that is due now: a first dispatch, or a re-send of one in flight."""

    command: PendingCommand
    is_retry: bool


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

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def lane(self, robot_id: str) -> RobotLane | None:
        return self.lanes.get(robot_id)

    def enqueue(self, command: PendingCommand) -> None:
        with self._lock:
            self.lanes[command.robot_id].queue.append(command)

    def restore_in_flight(self, command: PendingCommand) -> None:
        """A command sent before a crash: in flight, re-sent at once on the next tick."""
        with self._lock:
            command.dispatched = True
            self.lanes[command.robot_id].in_flight[command.robot_key] = command

    def queue_full(self, robot_id: str) -> bool:
        with self._lock:
            waiting = self.lanes[robot_id].waiting
        return waiting >= self.settings.queue_capacity_per_robot

    def due(self) -> tuple[list[Due], list[OnlineChange]]:
        """Deliveries due now, within each robot's capacity, and robots that came or went."""
        now = self._clock()
        due: list[Due] = []
        changes: list[OnlineChange] = []
        with self._lock:
            for lane in self.lanes.values():
                change = self._update_online(lane, now)
                if change is not None:
                    changes.append(change)
                if not lane.online:
                    continue
                for command in lane.in_flight.values():
                    if command.next_send_at <= now:
                        due.append(Due(command, is_retry=True))
                        self._schedule(command, now)
                while (
                    lane.queue and len(lane.in_flight) < lane.capacity and lane.paused_until <= now
                ):
                    command = lane.queue.popleft()
                    command.dispatched = True
                    lane.in_flight[command.robot_key] = command
                    due.append(Due(command, is_retry=False))
                    self._schedule(command, now)
            for item in due:
                item.command.attempt += 1
        return due, changes

    def _schedule(self, command: PendingCommand, now: float) -> None:
        base = (
            self.settings.retry_initial_s
            if command.backoff_s == 0
            else min(command.backoff_s * 2, self.settings.retry_max_s)
        )
        command.backoff_s = base
        jitter = 1 + self.settings.retry_jitter * (2 * self._rng.random() - 1)
        command.next_send_at = now + base * jitter

    def _update_online(self, lane: RobotLane, now: float) -> OnlineChange | None:
        heard_recently = (
            lane.last_heard is not None and now - lane.last_heard <= self.settings.offline_after_s
        )
        if heard_recently == lane.online:
            return None
        lane.online = heard_recently
        if heard_recently:
            # Back: re-send what was in flight at once rather than after a long backoff.
            for command in lane.in_flight.values():
                command.next_send_at = now
                command.backoff_s = 0.0
        return OnlineChange(lane.robot_id, heard_recently, len(lane.in_flight), len(lane.queue))

    def on_status(self, robot_id: str, queue_depth: int, capacity: int) -> bool:
        """Note a robot's load; False when the robot is not part of the fleet."""
        with self._lock:
            lane = self.lanes.get(robot_id)
            if lane is None:
                return False
            lane.last_heard = self._clock()
            if capacity > 0:
                lane.capacity = capacity
            if queue_depth < capacity and lane.paused_until > lane.last_heard:
                lane.paused_until = min(
                    lane.paused_until, lane.last_heard + self.settings.busy_pause_s
                )
            return True

    def on_result(self, answer: Answer) -> tuple[ResultEffect, PendingCommand | None]:
        with self._lock:
            lane = self.lanes.get(answer.robot_id)
            command = lane.in_flight.get(answer.key) if lane is not None else None
            if lane is not None:
                lane.last_heard = self._clock()
            if command is None or lane is None:
                return ResultEffect.IGNORED, None
            if answer.state in FINAL_STATES:
                del lane.in_flight[answer.key]
                return ResultEffect.SETTLED, command
            if answer.status_code in (BUSY, STORE_FULL):
                del lane.in_flight[answer.key]
                command.dispatched = False
                command.backoff_s = 0.0
                lane.queue.appendleft(command)
                lane.paused_until = self._clock() + self.settings.busy_pause_s
                return ResultEffect.REQUEUED, command
            if answer.state == State.REJECTED or answer.status_code == GONE:
                del lane.in_flight[answer.key]
                return ResultEffect.SETTLED, command
            if answer.status_code in (ACCEPTED, CONFLICT):
                command.acknowledged = True
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
