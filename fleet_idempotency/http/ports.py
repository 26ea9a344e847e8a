"""Choosing the HTTP port for a fleet being started (no ROS imports)."""

from __future__ import annotations

import socket


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
