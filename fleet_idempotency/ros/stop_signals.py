"""SIGINT and SIGTERM shut a node's context down *before* its executors are woken.

rclpy's own signal handler (Jazzy) wakes the executors first and shuts the context down
after, from another thread. An executor that rebuilds its wait set in between finds the
context still valid and waits again, now with nothing left to wake it: a node whose
executor has no timer and no traffic (the orchestrator's main executor holds only its
services) then never exits. Measured: 4 of 150 SIGTERMs to a bare service node on a
loaded machine hung for ever (docs/design.md, "No input kills a node").

Here the signal only writes a byte to a socket (Python's wake-up fd, written from the C
signal handler, so it works while the main thread is blocked in a wait); a watcher thread
reads it and calls ``rclpy.try_shutdown``, which invalidates the context first and then
runs its on-shutdown callbacks, among them every executor's ``wake``. Nothing is polled.

``before_stop``: work that needs DDS one last time (a backend canceling its robot's
running goal) runs on the watcher thread before the context goes; after it, nothing can
be sent. Each such callback bounds its own wait.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_before_stop: dict[int, Callable[[], object]] = {}
_before_stop_lock = threading.Lock()


def before_stop(callback: Callable[[], object]) -> Callable[[], None]:
    """Run ``callback`` when a stop signal arrives, before the context is shut down
    (``run_before_stop``); returns the function that takes it back."""
    with _before_stop_lock:
        _before_stop[id(callback)] = callback

    def remove() -> None:
        with _before_stop_lock:
            _before_stop.pop(id(callback), None)

    return remove


def run_before_stop() -> None:
    """Each registered callback once, in registration order; an error is printed, never
    raised: shutting down must go on."""
    with _before_stop_lock:
        callbacks = list(_before_stop.values())
        _before_stop.clear()
    for callback in callbacks:
        try:
            callback()
        except Exception as error:
            print(f"stop-signals: {callback!r} failed: {error!r}", file=sys.stderr, flush=True)


def shut_down_on_stop_signals(shut_down: Callable[[], object]) -> threading.Thread:
    """From the main thread, after ``rclpy.init(signal_handler_options=NO)``: call
    ``shut_down`` on a watcher thread at the first SIGINT or SIGTERM."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for stop_signal in STOP_SIGNALS:
        # The Python-level handler does nothing: the wake-up fd carries the signal. (The
        # default SIGINT handler would raise KeyboardInterrupt in the middle of shutdown.)
        signal.signal(stop_signal, _ignore)
    watcher = threading.Thread(
        target=_shut_down_when_signalled,
        args=(reader, writer, shut_down),
        name="stop-signals",
        daemon=True,
    )
    watcher.start()
    return watcher


def _ignore(_signum: int, _frame: object) -> None:
    return None


def _shut_down_when_signalled(
    reader: socket.socket, _writer: socket.socket, shut_down: Callable[[], object]
) -> None:
    # The wake-up fd carries every signal Python handles (SIGALRM, SIGCHLD...): wait for
    # a stop signal. ``_writer`` is passed only to keep its descriptor open.
    stop_numbers = {int(stop_signal) for stop_signal in STOP_SIGNALS}
    while True:
        received = reader.recv(64)
        if not received:
            return
        if stop_numbers.intersection(received):
            break
    shut_down()
