"""Bound the DDS participant's teardown, the last step of a node's stop, and exit 0 when
Fast DDS deadlocks in it.

Destroying a process's last node destroys its Fast DDS participant, whose first step,
``DomainParticipant::set_listener(nullptr)``, waits for the discovery callbacks in
progress. In Fast DDS 2.14 (ROS 2 Jazzy's) that wait has an infinite timeout which its
condition-variable wait turns into a loop that keeps holding the lock the callback needs
to finish (eProsima/Fast-DDS#6513): if a peer's discovery message is being handled at
that instant, which happens when every process of a fleet stops at once (a Ctrl-C of
``ros2 launch``), the thread spins for good, with the GIL held (rclpy does not release it
in ``destroy_node``). ``bench/repro_participant_teardown.py`` reproduces it with plain
rclpy. About one node stop in 200-500 was ended by the shutdown deadline (exit -14).

No Python thread can run then, so the backstop is native: POSIX timers whose expiry glibc
runs on a thread of its own (``SIGEV_THREAD``), calling libc's ``puts`` (the reason) and
then ``_exit(0)``. It is armed only after the node's own shutdown has finished (stores
closed, last results sent): all it can skip is the participant's goodbye to its peers,
who then drop it when its lease ends. No ROS imports; where the C library offers no such
timers (not glibc), there is no backstop and the shutdown deadline still ends the process.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

# A participant's teardown takes well under a second, more on a loaded machine; the
# shutdown deadline (parent_watch.SHUTDOWN_DEADLINE_S, 10 s from the stop) stays behind it.
TEARDOWN_LIMIT_S = 3.0
# Between the line saying why and the exit, so that the line is written first.
_EXIT_AFTER_MESSAGE_S = 0.1

_SIGEV_THREAD = 2
_CLOCK_MONOTONIC = 1
_IONBF = 2


class _SigevThread(ctypes.Structure):
    _fields_ = [("function", ctypes.c_void_p), ("attributes", ctypes.c_void_p)]


class _SigevUnion(ctypes.Union):
    _fields_ = [("padding", ctypes.c_int * 12), ("thread", _SigevThread)]


class _Sigevent(ctypes.Structure):
    """glibc's ``struct sigevent`` on 64-bit Linux (64 bytes)."""

    _fields_ = [
        ("value", ctypes.c_void_p),
        ("signal", ctypes.c_int),
        ("notify", ctypes.c_int),
        ("union", _SigevUnion),
    ]


class _Timespec(ctypes.Structure):
    _fields_ = [("seconds", ctypes.c_long), ("nanoseconds", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("interval", _Timespec), ("value", _Timespec)]


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    needed = ("timer_create", "timer_settime", "timer_delete", "puts", "_exit", "setvbuf")
    if not all(hasattr(libc, name) for name in needed):
        return None
    libc.timer_create.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(_Sigevent),
        ctypes.POINTER(ctypes.c_void_p),
    ]
    libc.timer_settime.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.POINTER(_Itimerspec),
        ctypes.c_void_p,
    ]
    libc.timer_delete.argtypes = [ctypes.c_void_p]
    libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t]
    return libc


def _native_timer(libc: ctypes.CDLL, function: Any, argument: int, seconds: float) -> int:
    """Call ``function(argument)`` on a new native thread in ``seconds``; the timer's id."""
    event = _Sigevent()
    event.notify = _SIGEV_THREAD
    event.value = argument
    event.union.thread.function = ctypes.cast(function, ctypes.c_void_p).value
    timer = ctypes.c_void_p()
    if libc.timer_create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)) != 0:
        raise OSError(ctypes.get_errno(), "timer_create")
    due = _Itimerspec()
    due.value.seconds = int(seconds)
    due.value.nanoseconds = int((seconds - int(seconds)) * 1e9)
    if libc.timer_settime(timer, 0, ctypes.byref(due), None) != 0:
        libc.timer_delete(timer)
        raise OSError(ctypes.get_errno(), "timer_settime")
    return int(timer.value or 0)


@contextmanager
def participant_teardown_backstop(name: str, limit_s: float = TEARDOWN_LIMIT_S) -> Iterator[None]:
    """Run the block (the destruction of the process's nodes); if it has not finished in
    ``limit_s``, print why and exit 0 from a native thread, whatever holds the GIL."""
    libc = _glibc()
    if libc is None:
        yield
        return
    message = ctypes.create_string_buffer(
        f"{name}: the DDS participant's teardown did not finish in {limit_s:g} s (a Fast DDS "
        "deadlock, eProsima/Fast-DDS#6513); exiting 0 without it, the node's own shutdown "
        "had finished".encode()
    )
    # What Python buffered goes out before a possible _exit; C's stdout is made unbuffered
    # so that puts writes the reason itself.
    for stream in (sys.stdout, sys.stderr):
        with suppress(ValueError, OSError):
            stream.flush()
    libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, _IONBF, 0)
    timers: list[int] = []
    try:
        timers.append(_native_timer(libc, libc.puts, ctypes.addressof(message), limit_s))
        timers.append(_native_timer(libc, libc._exit, 0, limit_s + _EXIT_AFTER_MESSAGE_S))
    except OSError:
        for timer in timers:
            libc.timer_delete(timer)
        timers.clear()  # no backstop: the shutdown deadline still ends a hung teardown
    try:
        yield
    finally:
        for timer in timers:
            libc.timer_delete(timer)
