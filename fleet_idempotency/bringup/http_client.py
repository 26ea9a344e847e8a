"""The demo's HTTP clients: a warehouse system submitting over the HTTP API.

Retries as such a client should: the same ``Idempotency-Key`` on every call, honouring
``Retry-After`` on 503 (orchestrator restarting) and 429, and re-sending when a call
fails at the transport. Answers are turned into the shape of a SubmitCommand response
(state, status_code, replayed, result_json, message), so the demo treats both paths
alike. Standard library only (``urllib``): no HTTP client dependency at run time.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from fleet_idempotency.ros.fleet_client import NoAnswer, Submitted

# The HTTP API's state names, back to CommandResult.STATE_* numbers.
STATE_NUMBERS = {
    "unknown": 0,
    "accepted": 1,
    "in_progress": 2,
    "completed": 3,
    "failed": 4,
    "interrupted": 5,
    "rejected": 6,
    "expired": 7,
}
RETRY_STATUSES = (429, 503)


@dataclass(frozen=True)
class HttpReply:
    state: int
    status_code: int
    replayed: bool
    result_json: str
    message: str


def reply_from_http(status: int, headers: dict[str, str], body: bytes) -> HttpReply:
    document: dict[str, Any] = json.loads(body) if body else {}
    replayed = headers.get("idempotent-replayed") == "true"
    command = document.get("command", document)  # final failures carry it as an extension
    result = command.get("result")
    state = STATE_NUMBERS.get(str(command.get("state", "")), 0)
    if "state" not in command:
        state = 6 if status < 500 else 0  # a refusal (problem) names no command state
    return HttpReply(
        state=state,
        status_code=status,
        replayed=replayed,
        result_json=json.dumps(result, sort_keys=True) if result is not None else "",
        message=str(document.get("detail", "")),
    )


class HttpFleetClient:
    def __init__(self, base_url: str, api_key: str, *, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._timeout_s = timeout_s
        self.calls = 0
        self.retried_503 = 0

    def _post(self, path: str, key: str, body: dict[str, Any], timeout_s: float) -> HttpReply:
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Idempotency-Key": key,
                "Authorization": f"Bearer {self._api_key}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                status, headers, content = answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as error:
            status, headers, content = error.code, dict(error.headers), error.read()
        lowered = {name.lower(): value for name, value in headers.items()}
        reply = reply_from_http(status, lowered, content)
        if status in RETRY_STATUSES:
            raise _RetryLater(reply, float(lowered.get("retry-after", "1")))
        return reply

    def submit(
        self,
        key: str,
        robot_id: str,
        command_type: str,
        payload: dict[str, Any],
        *,
        wait_timeout_s: float = 0.0,
        deadline_s: float = 120.0,
    ) -> Submitted:
        """POST until the API answers something other than "retry later"."""
        body = {
            "command_type": command_type,
            "payload": payload,
            "wait_timeout_sec": wait_timeout_s,
        }
        started = time.monotonic()
        calls = 0
        while True:
            calls += 1
            self.calls += 1
            try:
                reply = self._post(
                    f"/v1/robots/{robot_id}/commands", key, body, wait_timeout_s + self._timeout_s
                )
                return Submitted(reply, calls, time.monotonic() - started)
            except _RetryLater as later:
                if later.reply.status_code == 503:
                    self.retried_503 += 1
                pause = later.retry_after_s
            except (urllib.error.URLError, TimeoutError, ConnectionError):
                pause = 1.0  # the server itself is restarting or unreachable: same key again
            if time.monotonic() - started + pause > deadline_s:
                raise NoAnswer(f"no final HTTP answer for {key} after {calls} calls")
            time.sleep(pause)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.base_url}/readyz", timeout=2.0):
                    return
            except (urllib.error.URLError, TimeoutError, ConnectionError):
                if time.monotonic() > deadline:
                    raise NoAnswer(f"the HTTP API at {self.base_url} did not start") from None
                time.sleep(0.2)


class _RetryLater(Exception):
    def __init__(self, reply: HttpReply, retry_after_s: float) -> None:
        super().__init__(reply.message)
        self.reply = reply
        self.retry_after_s = retry_after_s
