"""Choosing the port of a server being started (no ROS imports)."""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

LOCK_DIR = Path(tempfile.gettempdir()) / "fleet_idempotency_ports"
_ATTEMPTS = 50


def available_port(host: str, preferred: int) -> int:
    """``preferred`` when it can be bound on ``host`` now, else a free port the OS picks.

    A second fleet on the same machine (another user's demo, CI) must not fail to start
    because the first one holds the configured port.
    """
    for port in (preferred, 0):
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            chosen: int = probe.getsockname()[1]
            return chosen
    raise OSError(f"no port can be bound on {host}")


class PortLease:
    """An :func:`available_port` that no other run of this package takes until released.

    Between the probe and the server's own bind there are seconds (a node starting): two
    fleets started at once both found the configured port free, and one fleet's clients
    were answered by the other's server. Every run of this package leases its ports with an
    exclusive ``flock`` on a per-port file; the lock dies with the process. ``exact``: the
    port the user asked for, leased as it is, never another.
    """

    def __init__(self, host: str, preferred: int = 0, *, exact: bool = False) -> None:
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        for attempt in range(1 if exact else _ATTEMPTS):
            port = preferred if exact else available_port(host, preferred if attempt == 0 else 0)
            handle = os.open(LOCK_DIR / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(handle)
                continue
            self.port = port
            self._handle: int | None = handle
            return
        if exact:
            raise OSError(f"port {preferred} is in use by another fleet of this machine")
        raise OSError(f"no port on {host} free of other runs' leases after {_ATTEMPTS} tries")

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            os.close(self._handle)
            self._handle = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
