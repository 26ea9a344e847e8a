"""A node started by ``fleet-idem`` stops when its parent dies, however the parent died.

``fleet-idem up``/``demo`` pass each child the read end of a pipe whose write end only
the parent holds (``FLEET_IDEM_PARENT_FD``). When the parent exits for any reason,
SIGKILL included, the kernel closes the write end and the child's read returns EOF: the
child then shuts itself down like on SIGTERM (stores closed cleanly), and exits hard if
that has not finished within a grace period. Event-driven: one thread blocked in
``read``, nothing polled. Unlike ``PR_SET_PDEATHSIG``, this does not fire when merely the
parent's *thread* that spawned the child ends (the supervisor restarts children from
its own threads). Under ``ros2 launch`` the variable is absent and nothing happens.
No ROS imports.
"""

from __future__ import annotations

import os
import signal
import threading

PARENT_FD_VARIABLE = "FLEET_IDEM_PARENT_FD"
GRACE_S = 10.0
# How long a node's own shutdown (stores closed, nodes destroyed) may take: it takes
# well under a second, and what launch, fleet-idem and the tests wait for a node's exit
# (10-20 s) must see a hung one end.
SHUTDOWN_DEADLINE_S = 10.0


def arm_shutdown_deadline(seconds: float | None = None) -> None:
    """Have the kernel end this process if its shutdown has not finished in ``seconds``.

    Call it from the main thread as shutdown begins. The deadline is SIGALRM's default
    action, which needs no GIL: rclpy's ``Node.destroy_node`` was seen to busy-wait in C++
    with the GIL held (``destroy_when_not_in_use``), for ever, so that no Python thread,
    the parent watcher's hard exit included, ever ran again. The node kept a core busy
    long after ``fleet-idem`` was gone.
    """
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, SHUTDOWN_DEADLINE_S if seconds is None else seconds)


def watch_parent(environ: dict[str, str] | None = None) -> threading.Thread | None:
    """Start the watcher if this process was given a parent pipe; return its thread."""
    value = (environ if environ is not None else os.environ).get(PARENT_FD_VARIABLE, "")
    if not value.isdigit():
        return None
    fd = int(value)
    try:
        os.fstat(fd)
    except OSError:
        return None  # inherited the variable but not the descriptor (a grandchild)
    thread = threading.Thread(target=_wait_for_eof, args=(fd,), name="parent-watch", daemon=True)
    thread.start()
    return thread


def _wait_for_eof(fd: int) -> None:
    try:
        while os.read(fd, 1):
            pass  # the parent never writes; any byte is ignored
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    # Not sleep-and-hope: a hard deadline for a shutdown that hangs with nobody left to
    # SIGKILL it.
    threading.Event().wait(GRACE_S)
    os._exit(1)
