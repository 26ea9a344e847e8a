"""Ports for servers being started: two runs of this package never get the same one."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from fleet_idempotency.http.ports import PortLease, available_port

HOLD_A_LEASE = """
import sys
from fleet_idempotency.http.ports import PortLease
lease = PortLease("127.0.0.1", int(sys.argv[1]), exact=True)
print(lease.port, flush=True)
sys.stdin.read()
"""


def test_a_port_leased_by_another_process_is_not_handed_out_while_it_is_free() -> None:
    preferred = available_port("127.0.0.1", 0)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_LEASE, str(preferred)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert int(holder.stdout.readline()) == preferred
        # Nothing listens on it: a bare probe would hand it out again.
        assert available_port("127.0.0.1", preferred) == preferred
        with PortLease("127.0.0.1", preferred) as second:
            assert second.port != preferred
        with pytest.raises(OSError, match=f"port {preferred} is in use by another fleet"):
            PortLease("127.0.0.1", preferred, exact=True)
    finally:
        holder.communicate("")
    # The holder's lease died with it.
    with PortLease("127.0.0.1", preferred, exact=True) as again:
        assert again.port == preferred


def test_a_port_a_server_holds_is_never_leased() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        taken = server.getsockname()[1]
        with PortLease("127.0.0.1", taken) as lease:
            assert lease.port != taken
