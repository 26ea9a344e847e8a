"""The fleet as an action: what one ExecuteCommand goal does, free of ROS.

A goal is a submit that is followed to its end. Retries are deduplicated by the
idempotency key, never by the goal UUID: a goal is submitted to ``OrchestratorCore`` under
its (client, key) exactly as SubmitCommand and the HTTP API submit, so the claim in the
orchestrator's store decides. The goal that made the claim owns the command; every other
goal with that (client, key) (a retry with a new UUID after a lost accept, a client that
restarted, an orchestrator that restarted) attaches to it and ends with the same state,
code and result, flagged ``replayed``. A mismatching fingerprint, a bad request, a full
queue end the goal at once with SubmitCommand's answer.

Cancel (``cancel``) withdraws the command only while it was never sent to its robot
(``OrchestratorCore.withdraw``); after that the robot may be acting, and the command runs to
its end. The ROS shell is ``action_server.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum

from fleet_idempotency.protocol import ACCEPTED, CONFLICT, INTERNAL, UNAVAILABLE, WITHDRAWN
from fleet_idempotency.store import State

from .core import OrchestratorCore, SubmitAnswer, SubmitRequest, Withdrawal

# How often a waiting goal looks at its command's progress (for feedback) between the
# store's own wake-ups on a final result.
PROGRESS_POLL_S = 0.2


class Ending(Enum):
    """How the goal ends, as the action's goal status says it."""

    SUCCEEDED = "succeeded"  # COMPLETED
    CANCELED = "canceled"  # withdrawn by this goal's own cancel
    ABORTED = "aborted"  # everything else: FAILED, INTERRUPTED, refusals


@dataclass(frozen=True)
class GoalOutcome:
    answer: SubmitAnswer
    ending: Ending


Feedback = Callable[[State, int, str], None]


class ExecuteGoals:
    """Runs ExecuteCommand goals against the orchestrator's core.

    ``max_waiting``: goals that may wait for their command's end at once (each holds a
    thread); past it a goal ends at once with the 202/409 answer and says so, as
    SubmitCommand does past its cap. ``kick``: wakes the dispatcher after a submit.
    """

    def __init__(
        self, core: OrchestratorCore, *, kick: Callable[[], None], max_waiting: int
    ) -> None:
        self.core = core
        self._kick = kick
        self._slots = threading.BoundedSemaphore(max_waiting)
        self.max_waiting = max_waiting
        self._stopping = threading.Event()

    def stop(self) -> None:
        """The server is going away: waiting goals end now (their client re-sends)."""
        self._stopping.set()

    def run(
        self,
        request: SubmitRequest,
        feedback: Feedback,
        cancel_requested: Callable[[], bool] = lambda: False,
    ) -> GoalOutcome:
        """Submit ``request`` (its wait is ignored) and follow it to its final answer."""
        request = replace(request, wait_timeout_s=0.0)
        answer = self.core.submit(request)
        self._kick()
        if answer.status_code not in (ACCEPTED, CONFLICT):
            # Final already (a replay), or refused: SubmitCommand's answer is the result.
            return GoalOutcome(answer, _ending(answer, cancel_requested()))
        attached = answer.status_code == CONFLICT
        if not self._slots.acquire(blocking=False):
            self.core.counters["goals_not_waited"] += 1
            answer = replace(
                answer,
                message=f"{answer.message}; not waited: {self.max_waiting} goals are already "
                "waiting; send the goal again (same key: it attaches) or poll CheckKey",
            )
            return GoalOutcome(answer, Ending.ABORTED)
        try:
            final = self._follow(request, answer, feedback)
        finally:
            self._slots.release()
        final = replace(final, replayed=attached)
        return GoalOutcome(final, _ending(final, cancel_requested()))

    def cancel(self, client_id: str, key: str) -> Withdrawal:
        withdrawal = self.core.withdraw(client_id, key)
        if withdrawal.withdrawn:
            self._kick()
        return withdrawal

    def _follow(
        self, request: SubmitRequest, first: SubmitAnswer, feedback: Feedback
    ) -> SubmitAnswer:
        client_id, key = request.client_id, request.key
        last = (first.state, first.status_code)
        feedback(first.state, first.status_code, first.message)
        while not self._stopping.is_set():
            final = self.core.final_answer(client_id, key, PROGRESS_POLL_S)
            if final is not None:
                feedback(final.state, final.status_code, final.message or "final")
                return final
            progress = self.core.progress(client_id, key)
            if progress is None:
                gone = self._no_longer_known(client_id, key)
                if gone is not None:
                    return gone
                continue
            if (progress.state, progress.status_code) != last:
                last = (progress.state, progress.status_code)
                feedback(progress.state, progress.status_code, progress.message)
        return SubmitAnswer(
            State.UNKNOWN,
            UNAVAILABLE,
            message="the orchestrator is shutting down; send the goal again with the same "
            "key (it attaches to the same command) or poll CheckKey",
        )

    def _no_longer_known(self, client_id: str, key: str) -> SubmitAnswer | None:
        """Neither final nor held here: still in flight elsewhere (another replica's robot:
        keep waiting, None), or released without a refusal this process noted."""
        status, _robot = self.core.check_key(client_id, key)
        if status.found and status.state in (State.ACCEPTED, State.IN_PROGRESS):
            return None
        if status.state in (State.COMPLETED, State.FAILED, State.INTERRUPTED):
            return SubmitAnswer(status.state, status.status_code, result_json=status.result_json)
        return SubmitAnswer(
            status.state if status.state == State.REJECTED else State.UNKNOWN,
            status.status_code if status.status_code >= 400 else INTERNAL,
            message=status.message or "the command is no longer known; use the status check",
        )


def _ending(answer: SubmitAnswer, cancel_requested: bool) -> Ending:
    if answer.state == State.COMPLETED:
        return Ending.SUCCEEDED
    if answer.status_code == WITHDRAWN and cancel_requested:
        return Ending.CANCELED
    return Ending.ABORTED
