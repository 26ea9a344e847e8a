"""Conversions between the generated ROS interfaces and the transport-neutral forms."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

from builtin_interfaces.msg import Time

from fleet_idempotency.events import FleetEventRecord
from fleet_idempotency.msg import CommandResult, FleetCommand, FleetEvent, FleetEventBatch
from fleet_idempotency.protocol import INTERNAL, Answer, Delivery, KeyStatus
from fleet_idempotency.srv import CheckKey
from fleet_idempotency.store import State


def epoch_to_time(seconds: float) -> Time:
    whole = math.floor(seconds)
    return Time(sec=int(whole), nanosec=int((seconds - whole) * 1e9))


def time_to_epoch(stamp: Time) -> float:
    return float(stamp.sec) + float(stamp.nanosec) * 1e-9


def delivery_from_msg(message: FleetCommand) -> Delivery:
    return Delivery(
        key=message.idempotency_key,
        client_id=message.client_id,
        robot_id=message.robot_id,
        command_type=message.command_type,
        payload_json=message.payload_json,
        payload_sha256=message.payload_sha256,
        attempt=message.attempt,
        auth_key_id=message.auth_key_id,
        auth_tag=message.auth_tag,
        fencing_token=message.fencing_token,
    )


def delivery_to_msg(delivery: Delivery, issued_at: Time | None = None) -> FleetCommand:
    return FleetCommand(
        idempotency_key=delivery.key,
        client_id=delivery.client_id,
        robot_id=delivery.robot_id,
        command_type=delivery.command_type,
        payload_json=delivery.payload_json,
        payload_sha256=delivery.payload_sha256,
        attempt=delivery.attempt,
        issued_at=issued_at or Time(),
        auth_key_id=delivery.auth_key_id,
        auth_tag=delivery.auth_tag,
        fencing_token=delivery.fencing_token,
    )


def answer_to_msg(answer: Answer, stamp: Time) -> CommandResult:
    return CommandResult(
        idempotency_key=answer.key,
        client_id=answer.client_id,
        robot_id=answer.robot_id,
        command_type=answer.command_type,
        state=int(answer.state),
        status_code=answer.status_code,
        replayed=answer.replayed,
        result_json=answer.result_json,
        message=answer.message,
        payload_sha256=answer.payload_sha256,
        attempt=answer.attempt,
        stamp=stamp,
    )


class InvalidMessage(ValueError):
    """A message whose fields no sender of this package would produce (dropped, counted)."""


def answer_from_msg(message: CommandResult) -> Answer:
    try:
        state = State(message.state)
    except ValueError:
        raise InvalidMessage(f"unknown state {message.state}") from None
    return Answer(
        key=message.idempotency_key,
        client_id=message.client_id,
        robot_id=message.robot_id,
        command_type=message.command_type,
        state=state,
        status_code=message.status_code,
        replayed=message.replayed,
        result_json=message.result_json,
        message=message.message,
        payload_sha256=message.payload_sha256,
        attempt=message.attempt,
    )


def fill_check_key_response(status: KeyStatus, response: CheckKey.Response) -> CheckKey.Response:
    response.found = status.found
    response.state = int(status.state)
    response.status_code = status.status_code
    response.robot_id = status.robot_id
    response.command_type = status.command_type
    response.payload_sha256 = status.payload_sha256
    response.result_json = status.result_json
    response.message = status.message
    response.created_at = epoch_to_time(status.created_at)
    response.expires_at = epoch_to_time(status.expires_at)
    return response


def check_key_failed(response: CheckKey.Response, message: str) -> CheckKey.Response:
    """The answer of a status check whose handler failed unexpectedly: 500, nothing known."""
    response.found = False
    response.state = int(State.UNKNOWN)
    response.status_code = INTERNAL
    response.message = f"{message}; ask again"
    return response


# A batch stays a modest message (an accepted event carries its payload, up to 64 kB).
MAX_EVENTS_PER_BATCH = 256


def event_to_msg(event: FleetEventRecord) -> FleetEvent:
    return FleetEvent(
        sequence=event.sequence,
        event_type=str(event.event_type),
        idempotency_key=event.key,
        client_id=event.client_id,
        robot_id=event.robot_id,
        detail_json=json.dumps(event.detail, sort_keys=True),
        stamp=epoch_to_time(event.stamp),
    )


def event_batches(
    events: list[FleetEvent], size: int = MAX_EVENTS_PER_BATCH
) -> Iterator[FleetEventBatch]:
    for start in range(0, len(events), size):
        yield FleetEventBatch(events=events[start : start + size])
