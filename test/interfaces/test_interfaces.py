"""The package's own messages and services cross real process boundaries over Fast DDS."""

from __future__ import annotations

import time
from typing import Any

from support.paths import SUPPORT
from support.ros_support import ChildProcesses, wait_for

PEERS = str(SUPPORT / "ros_peers.py")


def test_state_and_code_constants_match_the_contract() -> None:
    from fleet_idempotency.msg import CommandResult

    states = {
        name: getattr(CommandResult, name)
        for name in dir(CommandResult)
        if name.startswith("STATE_")
    }
    assert states == {
        "STATE_UNKNOWN": 0,
        "STATE_ACCEPTED": 1,
        "STATE_IN_PROGRESS": 2,
        "STATE_COMPLETED": 3,
        "STATE_FAILED": 4,
        "STATE_INTERRUPTED": 5,
        "STATE_REJECTED": 6,
        "STATE_EXPIRED": 7,
    }
    assert CommandResult.CODE_MISMATCH == 422
    assert CommandResult.CODE_BUSY == 429


def test_every_interface_has_the_contract_fields() -> None:
    from fleet_idempotency.msg import (
        CommandResult,
        FleetCommand,
        FleetEvent,
        OrchestratorBoot,
        RobotStatus,
    )
    from fleet_idempotency.srv import CheckKey, SubmitCommand

    expected = {
        OrchestratorBoot: {"boot_id", "started"},
        FleetCommand: {
            "idempotency_key",
            "client_id",
            "robot_id",
            "command_type",
            "payload_json",
            "payload_sha256",
            "attempt",
            "issued_at",
        },
        CommandResult: {
            "idempotency_key",
            "client_id",
            "robot_id",
            "command_type",
            "state",
            "status_code",
            "replayed",
            "result_json",
            "message",
            "payload_sha256",
            "stamp",
        },
        FleetEvent: {
            "sequence",
            "event_type",
            "idempotency_key",
            "client_id",
            "robot_id",
            "detail_json",
            "stamp",
        },
        RobotStatus: {
            "robot_id",
            "robot_type",
            "x",
            "y",
            "theta",
            "queue_depth",
            "capacity",
            "busy",
            "current_key",
            "boot_id",
            "last_finished_key",
            "stamp",
        },
        SubmitCommand.Request: {
            "client_id",
            "idempotency_key",
            "robot_id",
            "command_type",
            "payload_json",
            "wait_timeout_sec",
        },
        SubmitCommand.Response: {"state", "status_code", "replayed", "result_json", "message"},
        CheckKey.Request: {"client_id", "idempotency_key"},
        CheckKey.Response: {
            "found",
            "state",
            "status_code",
            "robot_id",
            "command_type",
            "payload_sha256",
            "result_json",
            "message",
            "created_at",
            "expires_at",
        },
    }
    for interface, fields in expected.items():
        missing = fields - set(interface.get_fields_and_field_types())
        assert not missing, f"{interface.__name__} lacks {sorted(missing)}"


def test_fleet_command_round_trips_between_processes(
    ros_context: Any, ros_env: dict[str, str], children: ChildProcesses
) -> None:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from fleet_idempotency.msg import FleetCommand

    children.spawn_python("publisher", [PEERS, "publish-command"], ros_env)
    node = rclpy.create_node("command_listener", context=ros_context)
    received: list[FleetCommand] = []
    node.create_subscription(FleetCommand, "/fleet/forklift_1/commands", received.append, 10)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)

    wait_for(lambda: received, what="a FleetCommand from the other process", executor=executor)
    command = received[0]
    assert command.idempotency_key == "018f6b1e-7c2a-7d3e-9f10-1234567890ab"
    assert (command.client_id, command.robot_id, command.command_type) == (
        "wms-1",
        "forklift_1",
        "pick",
    )
    assert command.payload_json == '{"slot": "A1"}'
    assert command.payload_sha256 == "ab" * 32
    assert command.attempt == 3
    assert (command.issued_at.sec, command.issued_at.nanosec) == (1_700_000_000, 42)


def test_check_key_service_round_trips_between_processes(
    ros_context: Any, ros_env: dict[str, str], children: ChildProcesses
) -> None:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from fleet_idempotency.msg import CommandResult
    from fleet_idempotency.srv import CheckKey

    children.spawn_python("server", [PEERS, "serve-check-key"], ros_env)
    node = rclpy.create_node("check_key_client", context=ros_context)
    client = node.create_client(CheckKey, "/fleet/forklift_1/check_key")
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)
    wait_for(client.service_is_ready, what="the CheckKey server", executor=executor)

    # Right after discovery a request (or its reply) can be lost although the server looks
    # ready: re-send until one is answered (a status check is read-only, so that is safe).
    request = CheckKey.Request(client_id="wms-1", idempotency_key="k-123")
    sent: list[tuple[Any, float]] = []

    def answered() -> Any:
        done = next((f.result() for f, _at in sent if f.done()), None)
        if done is None and (not sent or time.monotonic() - sent[-1][1] > 2.0):
            sent.append((client.call_async(request), time.monotonic()))
        return done

    response = wait_for(answered, what="a CheckKey reply", executor=executor)
    assert response.found is True
    assert response.state == CommandResult.STATE_COMPLETED
    assert response.status_code == 200
    assert response.result_json == '{"pallet": "P-7"}'
    assert response.message == "key k-123 for client wms-1"
    assert (response.created_at.sec, response.expires_at.sec) == (100, 86_500)
