"""A real ``http_api`` process on a free localhost port, in front of a FleetHarness fleet."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fleet_idempotency.http.ports import PortLease

from support.fleet_harness import BIN, STARTUP_TIMEOUT_S, FleetHarness
from support.paths import FLEET_FILE

# Two clients from the environment variable, one operator from a keys file.
WMS_KEY = "wms-secret-0123456789abcdef"
MES_KEY = "mes-secret-0123456789abcdef"
OPS_KEY = "ops-secret-0123456789abcdef"
API_KEYS_ENV = f"wms={WMS_KEY},mes={MES_KEY}"


class HttpServer:
    def __init__(self, fleet: FleetHarness) -> None:
        self.fleet = fleet
        self.port = 0
        self.base_url = ""
        self._lease: PortLease | None = None

    def release_port(self) -> None:
        if self._lease is not None:
            self._lease.release()

    def start(self, *, auth: bool = True, ready: bool = True, **parameters: Any) -> None:
        """Start ``http_api``; wait until it serves and (``ready``) until it has matched
        the orchestrator's services, which discovery may take seconds to do."""
        if self._lease is None:  # a restart keeps its port
            self._lease = PortLease("127.0.0.1")
        self.port = self._lease.port
        self.base_url = f"http://127.0.0.1:{self.port}"
        settings: dict[str, Any] = {
            "fleet_file": str(FLEET_FILE),
            "port": self.port,
            "answer_timeout_s": 3.0,
            **parameters,
        }
        env = dict(self.fleet.env)
        if auth:
            keys_file = self.fleet.store_dir.parent / "api_keys.yaml"
            keys_file.write_text(
                f"api_keys:\n  - {{client_id: ops, key: {OPS_KEY}, operator: true}}\n"
            )
            settings["api_keys_file"] = str(keys_file)
            env["FLEET_IDEM_API_KEYS"] = API_KEYS_ENV
        args = [str(BIN / "http_api"), "--ros-args"]
        for name, value in settings.items():
            args += ["-p", f"{name}:={value}"]
        self.fleet.children.spawn("http", args, env)
        process = self.fleet.children.processes["http"]
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        probe = "/readyz" if ready else "/healthz"
        while True:
            assert process.poll() is None, f"http_api exited:\n{self.fleet.children.log('http')}"
            try:
                if httpx.get(f"{self.base_url}{probe}", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"http_api did not answer {probe} in time")
            time.sleep(0.1)

    def client(self, api_key: str | None = WMS_KEY, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60.0, **kwargs)

    def async_client(self, api_key: str | None = WMS_KEY) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=60.0)

    def wait_for_robots(self, robot_ids: list[str], timeout_s: float = 30.0) -> None:
        """Until the server has a status of each robot (its subscriptions matched)."""
        with self.client(OPS_KEY) as client:
            deadline = time.monotonic() + timeout_s
            while True:
                robots = {r["robot_id"]: r for r in client.get("/v1/robots").json()["robots"]}
                if all(robots.get(rid, {}).get("online") for rid in robot_ids):
                    return
                if time.monotonic() > deadline:
                    pytest.fail(f"http_api did not see robots {robot_ids} online: {robots}")
                time.sleep(0.1)


def post_command(
    client: httpx.Client,
    robot_id: str,
    key: str | None,
    command_type: str,
    payload: dict[str, Any],
    wait_s: float = 0.0,
    **extra: Any,
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post(
        f"/v1/robots/{robot_id}/commands",
        json={"command_type": command_type, "payload": payload, "wait_timeout_sec": wait_s},
        headers=headers,
        **extra,
    )


def wait_until_state(
    client: httpx.Client, key: str, states: tuple[str, ...], timeout_s: float = 60.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        answer = client.get(f"/v1/commands/{key}")
        if answer.status_code == 200 and answer.json()["state"] in states:
            document: dict[str, Any] = answer.json()
            return document
        if time.monotonic() > deadline:
            pytest.fail(f"{key} never reached {states}: {answer.status_code} {answer.text}")
        time.sleep(0.1)


@pytest.fixture
def http_server(fleet: FleetHarness) -> Iterator[HttpServer]:
    """A real http_api process in front of this test's fleet (started by the test)."""
    server = HttpServer(fleet)
    yield server
    server.release_port()
