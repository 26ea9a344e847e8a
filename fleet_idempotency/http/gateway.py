"""What the HTTP app needs from the fleet, as transport-neutral data (no ROS imports).

``node.py`` implements ``FleetGateway`` over the orchestrator's public ROS services;
anything else that answers the same questions could stand behind the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class Unavailable(Exception):
    """The orchestrator (or the world) did not answer in time: it may be restarting."""


@dataclass(frozen=True)
class SubmitCall:
    client_id: str
    key: str
    robot_id: str
    command_type: str
    payload_json: str
    wait_timeout_s: float


@dataclass(frozen=True)
class SubmitReply:
    """SubmitCommand.Response."""

    state: int
    status_code: int
    replayed: bool
    result_json: str
    message: str


@dataclass(frozen=True)
class KeyReport:
    """CheckKey.Response; times in epoch seconds."""

    found: bool
    state: int
    status_code: int
    robot_id: str
    command_type: str
    payload_sha256: str
    result_json: str
    message: str
    created_at: float
    expires_at: float


class FleetGateway(Protocol):
    def ready(self) -> bool:
        """Whether the orchestrator's services are matched (a call may be answered)."""
        ...

    async def submit(self, call: SubmitCall) -> SubmitReply: ...

    async def check(self, client_id: str, key: str) -> KeyReport: ...

    async def world(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(geometry, live state) of the simulated world."""
        ...
