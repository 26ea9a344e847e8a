"""Keep DDS traffic of one run away from every other run on a shared machine.

DDS discovery is per domain: two runs on the same ROS_DOMAIN_ID see each other's nodes,
and a client can be answered by a stranger's server. Each run (test, demo, bench) leases
a domain id through an exclusive ``flock`` on a per-id file, so concurrent runs of this
package never share one, and limits discovery to localhost so nothing leaves the machine.
The lease dies with the process, so a crashed run never strands an id.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

# Fast DDS derives UDP ports from the domain id (7400 + 250 * id + ...); above 101 they
# reach Linux's ephemeral port range (32768+) and may clash with ordinary sockets.
MIN_DOMAIN_ID = 1
MAX_DOMAIN_ID = 101
LOCK_DIR = Path(tempfile.gettempdir()) / "fleet_idempotency_domains"


class NoFreeDomainError(RuntimeError):
    """Every DDS domain id in the range is leased by another run of this package."""


@contextmanager
def lease_domain_id(preferred: int | None = None) -> Iterator[int]:
    """Hold a ROS domain id for the duration of the ``with`` block."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    candidates = list(range(MIN_DOMAIN_ID, MAX_DOMAIN_ID + 1))
    random.shuffle(candidates)  # spread concurrent runs instead of racing for id 1
    if preferred is not None:
        candidates.insert(0, preferred)
    for domain_id in candidates:
        handle = os.open(LOCK_DIR / f"{domain_id}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            continue
        try:
            yield domain_id
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            os.close(handle)
        return
    raise NoFreeDomainError(
        f"all ROS domain ids {MIN_DOMAIN_ID}..{MAX_DOMAIN_ID} are leased under {LOCK_DIR}"
    )


def isolated_environment(domain_id: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process that must only talk within ``domain_id``."""
    environment = dict(os.environ if base is None else base)
    environment["ROS_DOMAIN_ID"] = str(domain_id)
    environment["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    environment.pop("ROS_LOCALHOST_ONLY", None)  # deprecated on Jazzy; warns if both set
    environment["PYTHONUNBUFFERED"] = "1"
    return environment
