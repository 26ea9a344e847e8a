"""Which replica dispatches to which robot: leases with a TTL and a fencing token.

Any replica accepts submits (the shared store's claim decides duplicates), but commands
for one robot are dispatched by one replica at a time: the holder of that robot's lease.
The lease table lives in the shared database (``postgres_leases.py``); this module is the
holder's side and is free of ROS and of SQL.

Safety without synchronised clocks: the database stamps ``expires_at`` with its own clock
when a renewal commits, which is no earlier than when the holder *sent* it. The holder
trusts its lease only until ``sent + ttl * TRUST_FRACTION`` by its own monotonic clock,
so it stops dispatching well before anyone else may take the lease over. A holder that is
paused past that point (GC, swap, SIGSTOP) may still have a command on the wire: the
fencing token, one higher at each takeover, lets the robot drop it (agent/fencing.py).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Share of the TTL a holder trusts its lease after sending a renewal.
TRUST_FRACTION = 0.5


class LeaseUnavailable(RuntimeError):
    """The lease table cannot be reached; held leases stay trusted until they run out."""


class LeaseTable(ABC):
    """The shared record of who holds each robot, and the token of each holding."""

    @abstractmethod
    def acquire(self, robot_id: str, holder: str, ttl_s: float) -> int | None:
        """Take the lease if nobody holds it (or its holding expired); the new token."""

    @abstractmethod
    def renew(self, robot_id: str, holder: str, token: int, ttl_s: float) -> bool:
        """Extend a holding; False when it is no longer ours."""

    @abstractmethod
    def release(self, robot_id: str, holder: str, token: int) -> None:
        """Give the lease up now (a clean shutdown hands over without waiting the TTL)."""

    @abstractmethod
    def holders(self) -> dict[str, tuple[str, int]]:
        """Robot -> (holder, token) of every unexpired holding."""

    @abstractmethod
    def close(self) -> None: ...


@dataclass
class HeldLease:
    token: int
    trusted_until: float


class LeaseKeeper:
    """Takes free leases, renews held ones, and says at once when one is lost.

    ``on_acquired(robot, token)`` and ``on_lost(robot)`` run on the caller of ``step``
    (the keeper's thread): acquiring adopts the robot's commands, losing drops them.
    """

    def __init__(
        self,
        table: LeaseTable,
        holder: str,
        robots: Iterable[str],
        *,
        ttl_s: float,
        on_acquired: Callable[[str, int], None],
        on_lost: Callable[[str], None],
        on_error: Callable[[str], None] = lambda _message: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not ttl_s > 0:
            raise ValueError(f"lease ttl must be positive, got {ttl_s}")
        self.table = table
        self.holder = holder
        self.robots = list(robots)
        self.ttl_s = ttl_s
        self._on_acquired = on_acquired
        self._on_lost = on_lost
        self._on_error = on_error
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, HeldLease] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def token(self, robot_id: str) -> int | None:
        """The token to send under, or None when this replica must not dispatch to it."""
        with self._lock:
            lease = self._held.get(robot_id)
            if lease is None or self._clock() >= lease.trusted_until:
                return None
            return lease.token

    def held(self) -> dict[str, int]:
        with self._lock:
            return {robot: lease.token for robot, lease in self._held.items()}

    def step(self) -> None:
        for robot_id in self.robots:
            with self._lock:
                lease = self._held.get(robot_id)
            if lease is None:
                self._try_acquire(robot_id)
            else:
                self._renew(robot_id, lease)

    def _try_acquire(self, robot_id: str) -> None:
        sent = self._clock()
        try:
            token = self.table.acquire(robot_id, self.holder, self.ttl_s)
        except LeaseUnavailable as error:
            self._on_error(str(error))
            return
        if token is None:
            return
        with self._lock:
            self._held[robot_id] = HeldLease(token, sent + self.ttl_s * TRUST_FRACTION)
        self._on_acquired(robot_id, token)

    def _renew(self, robot_id: str, lease: HeldLease) -> None:
        sent = self._clock()
        if sent >= lease.trusted_until:
            self._lose(robot_id, "its lease ran out before a renewal got through")
            return
        try:
            renewed = self.table.renew(robot_id, self.holder, lease.token, self.ttl_s)
        except LeaseUnavailable as error:
            # Still ours until trusted_until; a later step gives it up if this lasts.
            self._on_error(str(error))
            return
        if not renewed:
            self._lose(robot_id, "another replica holds it now")
            return
        with self._lock:
            lease.trusted_until = sent + self.ttl_s * TRUST_FRACTION

    def _lose(self, robot_id: str, why: str) -> None:
        with self._lock:
            self._held.pop(robot_id, None)
        self._on_error(f"lost the lease on {robot_id}: {why}")
        self._on_lost(robot_id)

    # --- thread ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Several renewals per trusted span: one slow round trip does not lose a lease.
        period = self.ttl_s * TRUST_FRACTION / 4
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as error:  # the keeper must outlive any bug
                self._on_error(f"lease step failed: {error!r}")
            self._stop.wait(period)

    def stop(self, *, release: bool = True) -> None:
        """Stop renewing; hand the held leases over at once unless ``release`` is False."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        with self._lock:
            held, self._held = self._held, {}
        for robot_id, lease in held.items():
            self._on_lost(robot_id)
            if release:
                try:
                    self.table.release(robot_id, self.holder, lease.token)
                except LeaseUnavailable as error:
                    self._on_error(str(error))
