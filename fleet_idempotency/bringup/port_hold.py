"""Keep a killed child's UDP ports from its replacement while peers still believe in it.

A Fast DDS participant picks the lowest participant id whose unicast port is free. A
process killed with SIGKILL says no goodbye, so its peers keep its participant until its
lease ends (20 s by default), and the ports it held are free at once: its replacement
takes the same id and the same ports, and the peers then match the newcomer 2-3 s late,
where after a clean stop they match it at once (``bench/bench_discovery.py``: a
restarted client answered at a median 2.54 s after a kill -9, 0.34 s after SIGTERM, 0.28
s with the killed one's ports held). So the supervisor learns each child's UDP ports
while it runs (``udp_ports``) and, when the child dies by a signal, binds them
(``PortHold``) until the dead participant's lease has ended: the replacement takes the
next id. Ports another process took in between are skipped. Linux only (/proc); no ROS
imports.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

# Fast DDS's default participant lease (ROS 2 does not change it): how long peers keep a
# participant that vanished without a goodbye.
DEAD_PARTICIPANT_LEASE_S = 20.0
# DDSI-RTPS default ports: domain d's are 7400 + 250 d on; its two multicast ports (the
# first two) are shared on purpose by every participant of the domain, with SO_REUSEADDR.
PORT_BASE, DOMAIN_GAIN, MULTICAST_OFFSETS = 7400, 250, (0, 1)


def is_dds_multicast_port(port: int) -> bool:
    return port >= PORT_BASE and (port - PORT_BASE) % DOMAIN_GAIN in MULTICAST_OFFSETS


def udp_ports(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """The local ports of the IPv4 UDP sockets process ``pid`` holds (empty if it is gone
    or /proc cannot tell)."""
    inodes: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in (proc / str(pid) / "fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    if not inodes:
        return set()
    ports: set[int] = set()
    with contextlib.suppress(OSError):
        # The process's own network namespace: the child's, not ours, should they differ.
        table = (proc / str(pid) / "net" / "udp").read_text().splitlines()[1:]
        for line in table:
            fields = line.split()
            # sl, local_address (hex ip:port), rem_address, st, queues, tr, retrnsmt, uid,
            # timeout, inode
            if len(fields) > 9 and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class PortHold:
    """Bound UDP sockets on given ports, closed after ``hold_s`` or by ``release``."""

    def __init__(self, ports: set[int], hold_s: float = DEAD_PARTICIPANT_LEASE_S) -> None:
        self.sockets: list[socket.socket] = []
        for port in sorted(ports):
            if is_dds_multicast_port(port):
                # Held without SO_REUSEADDR it would shut the next participant out of
                # discovery altogether (when no other process of the domain holds it).
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                # No SO_REUSEADDR: a port shared on purpose (a multicast group's) stays
                # shared, and one already taken again is left to its new owner.
                sock.bind(("0.0.0.0", port))
            except OSError:
                sock.close()
                continue
            self.sockets.append(sock)
        self._timer = threading.Timer(hold_s, self.release)
        self._timer.daemon = True
        self._timer.start()

    @property
    def ports(self) -> set[int]:
        return {sock.getsockname()[1] for sock in self.sockets}

    def release(self) -> None:
        self._timer.cancel()
        sockets, self.sockets = self.sockets, []
        for sock in sockets:
            sock.close()
