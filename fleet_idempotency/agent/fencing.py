"""The robot's fence against a replica that lost its lease: the highest token wins.

Orchestrator replicas take turns on a robot under a lease; each takeover raises the
lease's fencing token. A replica that was paused or cut off may not yet know it lost the
lease and keep sending. The robot remembers the highest token it has seen, durably in its
own store (a robot restart must not lower the fence), and drops, unanswered, commands
below it: an answer would reach the current holder too, which must not read a stale
replica's refusal as its robot's. Token 0 means "no lease" (a lone orchestrator) and is
never fenced: a fleet without replicas behaves as before.
"""

from __future__ import annotations

from collections.abc import Callable

META_NAME = "fencing_token"


class FencingGate:
    def __init__(self, load: Callable[[], bytes | None], save: Callable[[bytes], None]) -> None:
        self._save = save
        stored = load()
        self.highest = int(stored.decode()) if stored else 0

    def admit(self, token: int) -> bool:
        """True when a command with ``token`` may run; a higher token is saved first."""
        if token in (0, self.highest):
            return True
        if token < self.highest:
            return False
        # Durable before the command runs: after a crash the fence is never lower than a
        # token this robot already acted for.
        self._save(str(token).encode())
        self.highest = token
        return True
