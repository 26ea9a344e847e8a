"""A client of a fleet under launch_testing: the public ROS services and the HTTP API.

Imported by the ``*_checks.py`` launch descriptions beside it (``launch_test`` loads
those by path, so this folder is put on ``sys.path`` by them). rclpy joins the domain
in ``ROS_DOMAIN_ID``, which the pytest side leased for the run.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import rclpy
from rclpy.executors import SingleThreadedExecutor

from fleet_idempotency.srv import CheckKey, GetWorldState, SubmitCommand
from fleet_idempotency.testing.agent_under_test import wait_until

T = TypeVar("T")
READY_TIMEOUT_S = 120.0
ANSWER_TIMEOUT_S = 90.0
# A request that went to a process since killed gets no answer: re-send the same key.
RESEND_S = 10.0


@dataclass
class HttpAnswer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


def child_pid(*marks: str) -> int | None:
    """The pid of this process's child whose command line holds every one of ``marks``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and all(mark in command for mark in marks):
            return int(entry.name)
    return None


class FleetProbe:
    def __init__(self) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(f"launch_probe_{os.getpid()}", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._submit = self.node.create_client(SubmitCommand, "/fleet/submit_command")

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()

    def wait_for(
        self, condition: Callable[[], T | None], what: str, timeout_s: float = READY_TIMEOUT_S
    ) -> T:
        return wait_until(
            condition,
            what,
            timeout_s=timeout_s,
            spin=lambda s: self.executor.spin_once(timeout_sec=s),
            poll_s=0.05,
        )

    def wait_ready(self, robots: Iterable[str], http_port: int | None = None) -> None:
        clients = [
            self._submit,
            self.node.create_client(CheckKey, "/fleet/check_key"),
            self.node.create_client(GetWorldState, "/world/state"),
            *(self.node.create_client(CheckKey, f"/fleet/{r}/check_key") for r in robots),
        ]
        for client in clients:
            self.wait_for(client.service_is_ready, f"the service {client.srv_name}")
        if http_port is not None:
            self.wait_for(lambda: self.http_ready(http_port), "the HTTP API's /readyz")

    def wait_robot_serving(self, robot_id: str, timeout_s: float = READY_TIMEOUT_S) -> Any:
        """A CheckKey answered by the robot's own agent (an unknown key: not found)."""
        client = self.node.create_client(CheckKey, f"/fleet/{robot_id}/check_key")
        request = CheckKey.Request(client_id="probe", idempotency_key="probe-unknown-key")
        return self.call(client, request, timeout_s=timeout_s)

    def submit(self, robot_id: str, command_type: str, payload: dict[str, Any], *, key: str) -> Any:
        request = SubmitCommand.Request(
            client_id="launch-test",
            idempotency_key=f"{key}-{os.getpid()}",
            robot_id=robot_id,
            command_type=command_type,
            payload_json=json.dumps(payload),
            wait_timeout_sec=30.0,
        )
        return self.call(self._submit, request)

    def call(self, client: Any, request: Any, timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
        """Send, and re-send the same request while no answer comes, until ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not client.service_is_ready():
                self.executor.spin_once(timeout_sec=0.1)
                continue
            future = client.call_async(request)
            resend_at = time.monotonic() + RESEND_S + getattr(request, "wait_timeout_sec", 0)
            while not future.done() and time.monotonic() < min(resend_at, deadline):
                self.executor.spin_once(timeout_sec=0.1)
            if future.done():
                return future.result()
            client.remove_pending_request(future)
        raise AssertionError(f"no answer from {client.srv_name} within {timeout_s:g} s")

    @staticmethod
    def http_ready(port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    @staticmethod
    def http_submit(port: int, robot_id: str, key: str, body: dict[str, Any]) -> HttpAnswer:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/robots/{robot_id}/commands",
            data=json.dumps(body).encode(),
            headers={"Idempotency-Key": f"{key}-{os.getpid()}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT_S) as reply:
                return HttpAnswer(reply.status, _lower(reply.headers.items()), reply.read())
        except urllib.error.HTTPError as error:
            return HttpAnswer(error.code, _lower(error.headers.items()), error.read())


def _lower(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers}
