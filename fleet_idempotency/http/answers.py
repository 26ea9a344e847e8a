"""SubmitCommand / CheckKey answers -> HTTP status, headers and body.

The body of a final answer is built only from what the store keeps for the key (state,
status code, result) and from the request itself (key, robot, command type, the
fingerprint of its canonical payload), never from per-call text such as the
orchestrator's message: so a replay is byte-for-byte the first final answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from .gateway import KeyReport, SubmitReply
from .problems import PROBLEM_MEDIA_TYPE, Problem, encode_json

JSON_MEDIA_TYPE = "application/json"
REPLAYED_HEADER = "Idempotent-Replayed"

# CommandResult.STATE_* (the public interface's constants, repeated here so that this
# module needs no ROS import)
STATE_NAMES = {
    0: "unknown",
    1: "accepted",
    2: "in_progress",
    3: "completed",
    4: "failed",
    5: "interrupted",
    6: "rejected",
    7: "expired",
}
FINAL_STATES = (3, 4, 5)
FAILED, INTERRUPTED, REJECTED = 4, 5, 6
# ExecuteCommand.Result.CODE_WITHDRAWN (protocol.WITHDRAWN).
WITHDRAWN = 499

# The orchestrator names the offending field first ("payload_json.slot: ..."); HTTP
# callers know these fields by their names in the HTTP request.
_FIELD_NAMES = {
    "key": "Idempotency-Key",
    "payload_json": "payload",
    "robot_id": "robot_id",
    "command_type": "command_type",
    "client_id": "Authorization",
}
_FIELD_PREFIX = re.compile(r"^([A-Za-z_]+)((?:\.[A-Za-z0-9_]+)*): ")


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes
    media_type: str = JSON_MEDIA_TYPE
    headers: dict[str, str] = field(default_factory=dict)


def command_location(key: str) -> str:
    return f"/v1/commands/{quote(key, safe='')}"


def http_field(message: str) -> str | None:
    """The HTTP name of the field an orchestrator message starts with, if any."""
    match = _FIELD_PREFIX.match(message)
    if match is None or match.group(1) not in _FIELD_NAMES:
        return None
    return _FIELD_NAMES[match.group(1)] + match.group(2)


def parse_result(result_json: str) -> Any:
    if not result_json:
        return None
    try:
        return json.loads(result_json)
    except ValueError:
        return result_json  # kept verbatim rather than lost


def command_document(
    *,
    key: str,
    robot_id: str,
    command_type: str,
    fingerprint: str,
    state: int,
    code: int,
    result_json: str,
) -> dict[str, Any]:
    return {
        "idempotency_key": key,
        "robot_id": robot_id,
        "command_type": command_type,
        "fingerprint": fingerprint,
        "state": STATE_NAMES.get(state, str(state)),
        "status_code": code,
        "result": parse_result(result_json),
    }


def submit_answer(
    reply: SubmitReply,
    *,
    key: str,
    robot_id: str,
    command_type: str,
    fingerprint: str,
    retry_after_s: int,
) -> HttpAnswer:
    """The HTTP answer to one SubmitCommand reply (422 is completed by the caller)."""
    location = command_location(key)
    headers = {"Location": location}
    if reply.replayed:
        headers[REPLAYED_HEADER] = "true"
    code = reply.status_code
    document = command_document(
        key=key,
        robot_id=robot_id,
        command_type=command_type,
        fingerprint=fingerprint,
        state=reply.state,
        code=code,
        result_json=reply.result_json,
    )
    if reply.state in FINAL_STATES:
        if code < 400:
            return HttpAnswer(code, encode_json(document), headers=headers)
        slug = "command-interrupted" if reply.state == INTERRUPTED else "command-failed"
        problem = Problem(
            code,
            slug,
            f"command {command_type} on {robot_id} ended {document['state']}; the result "
            "is final and the command will not be re-run",
            command=document,
        )
        return HttpAnswer(code, problem.body(), PROBLEM_MEDIA_TYPE, headers)
    if code == 202:
        return HttpAnswer(202, encode_json(document), headers=headers)
    raise problem_for_refusal(reply, location=location, retry_after_s=retry_after_s)


def problem_for_refusal(reply: SubmitReply, *, location: str, retry_after_s: int) -> Problem:
    """A submit answered with an error code (never a final result)."""
    code, message = reply.status_code, reply.message
    retry = {"Retry-After": str(retry_after_s)}
    if code == 409:
        return Problem(
            409,
            "in-progress",
            message or "the command is still in progress",
            headers={**retry, "Location": location},
            state=STATE_NAMES.get(reply.state, str(reply.state)),
            status_url=location,
        )
    if code == 410:
        return Problem(
            410,
            "key-expired",
            message or "the key is past retention",
            headers={"Location": location},
            status_url=location,
        )
    if code == 429:
        return Problem(429, "busy", message, headers=retry)
    if code == 503:
        return Problem(503, "store-unavailable", message, headers=retry)
    if code == 507:
        return Problem(507, "store-full", message, headers=retry)
    if code == 400:
        named = http_field(message)
        if reply.state == REJECTED and named is None:
            # Refused by the robot itself (an unknown waypoint, an out-of-reach slot).
            return Problem(400, "command-refused", message)
        return Problem(400, "invalid-request", message, field=named)
    if code == WITHDRAWN:
        # Waited on a key whose ExecuteCommand goal was canceled before dispatch.
        return Problem(409, "command-withdrawn", message)
    return Problem(502, "bad-gateway", f"unexpected answer {code}: {message}")


def iso_time(epoch_s: float) -> str | None:
    if epoch_s <= 0:
        return None
    return datetime.fromtimestamp(epoch_s, UTC).isoformat().replace("+00:00", "Z")


def status_document(key: str, report: KeyReport) -> dict[str, Any]:
    """GET /v1/commands/{key}: the reconciliation view of a key."""
    return {
        "idempotency_key": key,
        "state": STATE_NAMES.get(report.state, str(report.state)),
        "status_code": report.status_code,
        "result": parse_result(report.result_json),
        "robot_id": report.robot_id,
        "command_type": report.command_type,
        "fingerprint": report.payload_sha256,
        "created_at": iso_time(report.created_at),
        "expires_at": iso_time(report.expires_at),
        "message": report.message,
    }
