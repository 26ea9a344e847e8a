"""Resources that the agents of one process share, opened by the first user and closed
after the last one lets go.

A host of many simulated robots needs one connection to the world simulator, not one
per robot: every client of a service receives every reply of that service, so N links
made each reply cost O(N) in every agent process. Backends ask for such a resource by
name; the agent process owns the table and closes what is left when it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class SharedResources:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Any, Callable[[Any], None], int]] = {}

    def acquire(self, name: str, open_: Callable[[], T], close: Callable[[T], None]) -> T:
        """The resource ``name``, opened with ``open_`` if no one holds it yet."""
        with self._lock:
            held = self._held.get(name)
            if held is None:
                resource = open_()
                self._held[name] = (resource, close, 1)
                return resource
            resource, closer, users = held
            self._held[name] = (resource, closer, users + 1)
            return resource

    def release(self, name: str) -> None:
        """One user is done with ``name``; the last one closes it."""
        with self._lock:
            held = self._held.get(name)
            if held is None:
                return
            resource, closer, users = held
            if users > 1:
                self._held[name] = (resource, closer, users - 1)
                return
            del self._held[name]
        closer(resource)

    def users(self, name: str) -> int:
        with self._lock:
            held = self._held.get(name)
            return 0 if held is None else held[2]

    def close_all(self) -> None:
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for resource, closer, _users in held:
            closer(resource)
