"""A robot's action server for the ``ros_action`` backend's tests: a separate process.

A plain rclpy ActionServer of the package's own ExecuteCommand type, standing in for a
vendor's (or Nav2's) server. Every goal it accepts is written, fsync'd, to a JSON-lines
log before it "moves": the tests count goals per key from it (the side-effect oracle) and
read the goal UUIDs. A restarted process knows none of its predecessor's goals, as a
restarted real server does not.

Behaviour, from the goal's payload_json: ``x`` (metres) takes ``x * seconds_per_metre`` to
"drive"; dock ``D8`` aborts with status_code 500 (a fault after moving), dock ``D9`` with
404 (the server refused before acting); everything else succeeds with 200. A cancel is
accepted and ends the goal CANCELED.

    python test/support/action_server.py --name /robot/drive --log goals.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import rclpy
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor

from fleet_idempotency.action import ExecuteCommand


class Server:
    def __init__(self, node: Any, name: str, log: Path, seconds_per_metre: float) -> None:
        self.log = log
        self.seconds_per_metre = seconds_per_metre
        self._lock = threading.Lock()
        self.server = ActionServer(
            node,
            ExecuteCommand,
            name,
            execute_callback=self.execute,
            goal_callback=lambda _goal: GoalResponse.ACCEPT,
            cancel_callback=lambda _handle: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )

    def record(self, event: str, goal_id: str, key: str) -> None:
        line = json.dumps({"event": event, "goal_id": goal_id, "key": key, "pid": os.getpid()})
        with self._lock, self.log.open("a") as log:
            log.write(line + "\n")
            log.flush()
            os.fsync(log.fileno())

    def execute(self, handle: Any) -> Any:
        goal = handle.request
        goal_id = str(uuid.UUID(bytes=bytes(handle.goal_id.uuid)))
        self.record("goal", goal_id, goal.idempotency_key)
        payload = json.loads(goal.payload_json or "{}")
        ends = time.monotonic() + abs(float(payload.get("x", 0.0))) * self.seconds_per_metre
        while time.monotonic() < ends:
            if handle.is_cancel_requested:
                handle.canceled()
                self.record("canceled", goal_id, goal.idempotency_key)
                return ExecuteCommand.Result(status_code=499, message="canceled")
            time.sleep(0.02)
        dock = payload.get("dock")
        if dock in ("D8", "D9"):
            handle.abort()
            code, message = (500, "motor fault") if dock == "D8" else (404, "no such dock")
            self.record("aborted", goal_id, goal.idempotency_key)
            return ExecuteCommand.Result(status_code=code, message=message)
        handle.succeed()
        self.record("done", goal_id, goal.idempotency_key)
        return ExecuteCommand.Result(
            state=3,
            status_code=200,
            result_json=json.dumps({"arrived": payload, "pid": os.getpid()}, sort_keys=True),
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--seconds-per-metre", type=float, default=0.1)
    args = parser.parse_args()
    rclpy.init()
    node = rclpy.create_node("test_action_server")
    Server(node, args.name, args.log, args.seconds_per_metre)
    executor = MultiThreadedExecutor(num_threads=8)
    executor.add_node(node)
    print("serving", args.name, flush=True)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
