"""SIGINT and SIGTERM stop a node: once, cleanly, however many arrive and whenever.

rclpy's own signal handler (Jazzy) wakes the executors first and shuts the context down
after, from another thread. An executor that rebuilds its wait set in between finds the
context still valid and waits again, now with nothing left to wake it: a node whose
executor has no timer and no traffic (the orchestrator's main executor holds only its
services) then never exits. Measured: 4 of 150 SIGTERMs to a bare service node on a
loaded machine hung for ever (docs/design.md, "No input kills a node").

Here the signal only writes a byte to a socket (Python's wake-up fd, written from the C
signal handler, so it works while the main thread is blocked in a wait); a watcher thread
reads it and runs what was registered with ``on_stop`` (``rclpy.try_shutdown``, which
invalidates the context first and then wakes every executor; uvicorn's exit flag).
Nothing is polled. Three things make every stop clean, each seen failing under
``ros2 launch``, whose Ctrl-C reaches a node twice (the terminal's SIGINT to the process
group, then launch's own):

- The wake-up socket stays open for the life of the process. Python writes to the
  wake-up fd on *every* signal, and the watcher used to close it once it had acted: the
  second SIGINT then printed ``Exception ignored when trying to write to the signal
  wakeup fd ... Bad file descriptor`` (or wrote a byte into whatever file had reused the
  number).
- At exit the stop signals are ignored (``atexit``): interpreter finalisation resets every
  signal with a Python handler to its default action, and a second SIGINT landing then
  killed the exiting node (launch: ``process has died [exit code -2]``).
- ``install`` is the first thing a node executable does (``entry_points``), before rclpy
  and the node's modules load (~0.5 s): a SIGINT during start-up otherwise meets Python's
  default handler (a KeyboardInterrupt traceback, exit -2). A stop that comes before the
  node is up is remembered and ends it as soon as it can act on it.

``before_stop``: work that needs DDS one last time (a backend canceling its robot's
running goal) runs on the watcher thread before the context goes; after it, nothing can
be sent. Each such callback bounds its own wait.
"""

from __future__ import annotations

import atexit
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


class StopSignals:
    """This process's stop: ``received`` once a stop signal came; ``on_stop`` callbacks
    run once, on the watcher thread (or at once, for one registered after the stop)."""

    def __init__(self) -> None:
        self.received = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []

    def on_stop(self, callback: Callable[[], object]) -> None:
        with self._lock:
            if not self.received.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def stop(self) -> None:
        """What a stop signal does (also callable directly, e.g. by a test)."""
        with self._lock:
            if self.received.is_set():
                return
            self.received.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


# This process's one StopSignals, and the wake-up socket pair, referenced here for as
# long as the process lives.
_INSTALLED: list[StopSignals] = []
_WAKEUP: list[socket.socket] = []


def install() -> StopSignals:
    """Route SIGINT and SIGTERM to this process's ``StopSignals`` (from the main thread;
    idempotent: later calls return the same object)."""
    if _INSTALLED:
        return _INSTALLED[0]
    stops = StopSignals()
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    _WAKEUP[:] = [reader, writer]
    # The fd first: a stop arriving between the two would otherwise run the Python-level
    # handler with no byte written, and be lost.
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for stop_signal in STOP_SIGNALS:
        # The Python-level handler does nothing: the wake-up fd carries the signal. (The
        # default SIGINT handler would raise KeyboardInterrupt in the middle of shutdown.)
        signal.signal(stop_signal, _ignore)
    atexit.register(_ignore_stop_signals)
    threading.Thread(target=_watch, args=(reader, stops), name="stop-signals", daemon=True).start()
    _INSTALLED.append(stops)
    return stops


def shut_down_on_stop_signals(shut_down: Callable[[], object]) -> StopSignals:
    """``install``, and call ``shut_down`` at the first stop signal (or now, if one came)."""
    stops = install()
    stops.on_stop(shut_down)
    return stops


def _ignore(_signum: int, _frame: object) -> None:
    return None


def _ignore_stop_signals() -> None:
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, signal.SIG_IGN)


def _watch(reader: socket.socket, stops: StopSignals) -> None:
    # The wake-up fd carries every signal Python handles (SIGALRM, SIGCHLD...): act on a
    # stop signal, and keep draining after it so the socket never fills.
    stop_numbers = {int(stop_signal) for stop_signal in STOP_SIGNALS}
    while True:
        received = reader.recv(64)
        if not received:
            return
        if stop_numbers.intersection(received):
            stops.stop()
