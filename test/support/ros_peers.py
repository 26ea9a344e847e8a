"""Peer processes for the interface round-trip tests (run as separate OS processes).

python ros_peers.py publish-command     publish one known FleetCommand until killed
python ros_peers.py serve-check-key     answer CheckKey deterministically until killed
"""

from __future__ import annotations

import sys

import rclpy
from rclpy.executors import ExternalShutdownException

from fleet_idempotency.msg import CommandResult, FleetCommand
from fleet_idempotency.srv import CheckKey

COMMAND_TOPIC = "/fleet/forklift_1/commands"
CHECK_KEY_SERVICE = "/fleet/forklift_1/check_key"


def known_command() -> FleetCommand:
    command = FleetCommand()
    command.idempotency_key = "018f6b1e-7c2a-7d3e-9f10-1234567890ab"
    command.client_id = "wms-1"
    command.robot_id = "forklift_1"
    command.command_type = "pick"
    command.payload_json = '{"slot": "A1"}'
    command.payload_sha256 = "ab" * 32
    command.attempt = 3
    command.issued_at.sec = 1_700_000_000
    command.issued_at.nanosec = 42
    return command


def answer_check_key(request: CheckKey.Request, response: CheckKey.Response) -> CheckKey.Response:
    response.found = True
    response.state = CommandResult.STATE_COMPLETED
    response.status_code = CommandResult.CODE_OK
    response.robot_id = "forklift_1"
    response.command_type = "pick"
    response.payload_sha256 = "cd" * 32
    response.result_json = '{"pallet": "P-7"}'
    response.message = f"key {request.idempotency_key} for client {request.client_id}"
    response.created_at.sec = 100
    response.expires_at.sec = 100 + 86_400
    return response


def main() -> None:
    mode = sys.argv[1]
    rclpy.init()
    node = rclpy.create_node(f"peer_{mode.replace('-', '_')}")
    try:
        if mode == "publish-command":
            publisher = node.create_publisher(FleetCommand, COMMAND_TOPIC, 10)
            node.create_timer(0.05, lambda: publisher.publish(known_command()))
        elif mode == "serve-check-key":
            node.create_service(CheckKey, CHECK_KEY_SERVICE, answer_check_key)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
