"""The exception barrier every callback of every node goes through, as plain logic."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from fleet_idempotency.ros.guard import CallbackGuard


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def error(self, message: str, **kwargs: Any) -> None:
        self.lines.append((message, kwargs))


@dataclass
class _Response:
    status_code: int = 0
    message: str = ""


def _boom(*_args: object) -> Any:
    raise RecursionError("maximum recursion depth exceeded")


def test_a_topic_callback_that_raises_is_counted_logged_throttled_and_survives() -> None:
    log, counters = _Log(), Counter[str]()
    guarded = CallbackGuard(log, counters).topic("commands", _boom)
    for _ in range(3):
        guarded("message")  # returns: the executor is never reached by the error
    assert counters["callback_errors"] == 3
    assert counters["callback_errors.commands"] == 3
    assert "RecursionError" in log.lines[-1][0] and "commands" in log.lines[-1][0]
    assert log.lines[-1][1]["throttle_duration_sec"] > 0


def test_a_service_that_raises_still_answers_500_with_what_happened() -> None:
    counters: Counter[str] = Counter()

    def failed(response: _Response, message: str) -> _Response:
        response.status_code, response.message = 500, message
        return response

    guarded = CallbackGuard(_Log(), counters).service("submit_command", _boom, failed)
    answer = guarded("request", _Response())
    assert answer.status_code == 500
    assert "submit_command" in answer.message and "RecursionError" in answer.message
    assert counters["callback_errors.submit_command"] == 1


def test_callbacks_that_succeed_pass_through_untouched() -> None:
    counters: Counter[str] = Counter()
    guard = CallbackGuard(_Log(), counters)
    seen: list[str] = []
    guard.topic("t", seen.append)("hello")
    response = guard.service("s", lambda _req, resp: resp, lambda resp, _msg: resp)(
        "req", _Response(status_code=200)
    )
    assert seen == ["hello"] and response.status_code == 200
    assert counters["callback_errors"] == 0


def test_requests_to_stop_are_not_swallowed() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        CallbackGuard(_Log(), Counter()).timer("tick", interrupted)()


def test_a_failing_logger_does_not_turn_a_caught_error_into_a_crash() -> None:
    class _BrokenLog:
        def error(self, message: str, **kwargs: Any) -> None:
            raise OSError("stderr closed")

    counters: Counter[str] = Counter()
    CallbackGuard(_BrokenLog(), counters).timer("gc", _boom)()
    assert counters["callback_errors"] == 1 and counters["callback_log_failures"] == 1
