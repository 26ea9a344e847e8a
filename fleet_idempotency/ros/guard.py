"""Exception barriers for every callback edge of a node.

An exception that escapes an rclpy callback propagates out of ``executor.spin()`` and
ends the process: one crafted message would then take a robot (or the whole Unified
Control API) offline. Every subscription, service and timer callback of this package is
therefore wrapped here. What the logic did not expect is caught, counted per callback,
logged (throttled, so a flood of bad input cannot flood the log), and:

- a service still answers, with a 500-like response that says what happened (a submit
  that failed this way may be re-sent: the key makes it safe);
- a topic message is dropped (a topic has nobody to answer);
- a timer simply runs again at its next period.

``BaseException`` that is not an ``Exception`` (KeyboardInterrupt, SystemExit, the
executor's ExternalShutdownException is an Exception but is re-raised) still ends the
node: those are requests to stop, not bad input. No ROS imports: tested in-process.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

Message = TypeVar("Message")
Request = TypeVar("Request")
Response = TypeVar("Response")

LOG_THROTTLE_S = 5.0


class ThrottledLogger(Protocol):
    def error(self, message: str, **kwargs: Any) -> Any: ...


def _is_shutdown(error: Exception) -> bool:
    # rclpy's ExternalShutdownException (and its RCLError about an invalid context, raised
    # while the context is being shut down) mean "stop", and must reach the executor.
    return type(error).__name__ in ("ExternalShutdownException", "InvalidHandle")


class CallbackGuard:
    def __init__(self, logger: ThrottledLogger, counters: Counter[str]) -> None:
        self._logger = logger
        self.counters = counters

    def _report(self, name: str, error: Exception) -> str:
        self.counters["callback_errors"] += 1
        self.counters[f"callback_errors.{name}"] += 1
        description = f"{type(error).__name__}: {error}"[:500]
        try:
            self._logger.error(
                f"{name}: unexpected {description} (kept serving; "
                f"{self.counters[f'callback_errors.{name}']} so far)",
                throttle_duration_sec=LOG_THROTTLE_S,
            )
        except Exception:  # a logger that fails must not turn a caught error into a crash
            self.counters["callback_log_failures"] += 1
        return description

    def topic(self, name: str, callback: Callable[[Message], None]) -> Callable[[Message], None]:
        @functools.wraps(callback)
        def guarded(message: Message) -> None:
            try:
                callback(message)
            except Exception as error:
                if _is_shutdown(error):
                    raise
                self._report(name, error)

        return guarded

    def timer(self, name: str, callback: Callable[[], None]) -> Callable[[], None]:
        @functools.wraps(callback)
        def guarded() -> None:
            try:
                callback()
            except Exception as error:
                if _is_shutdown(error):
                    raise
                self._report(name, error)

        return guarded

    def service(
        self,
        name: str,
        callback: Callable[[Request, Response], Response],
        on_error: Callable[[Response, str], Response],
    ) -> Callable[[Request, Response], Response]:
        """``on_error(response, description)`` fills the 500-like answer."""

        @functools.wraps(callback)
        def guarded(request: Request, response: Response) -> Response:
            try:
                return callback(request, response)
            except Exception as error:
                if _is_shutdown(error):
                    raise
                description = self._report(name, error)
                return on_error(response, f"internal error in {name} ({description})")

        return guarded
