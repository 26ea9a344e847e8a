"""SIGINT/SIGTERM end a node even when nothing else would ever wake its executor.

The orchestrator's main executor holds services and one long-period timer: with rclpy's
own signal handler, a wake-up that came before the context shutdown was lost and the
process hung (a CI run waited 20 s for it; 4 of 150 SIGTERMs on a loaded machine). The
node here has one service and no timer, the worst case. The child records every executor
wake-up until spin has returned, with whether the context was still valid: with
``stop_signals`` spin returns because of a wake-up that came after the shutdown. (With
rclpy's handler it returns on its signal guard condition, and no wake-up is recorded.)
"""

from __future__ import annotations

import json
import signal
import sys

import pytest
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from fleet_idempotency.srv import CheckKey

from support.ros_support import ChildProcesses, ask_service, wait_for

QUIET_NODE = """
import json
from rclpy.executors import Executor
from rclpy.node import Node
from fleet_idempotency.ros.node_main import run_nodes
from fleet_idempotency.srv import CheckKey

wakes = []
plain_wake = Executor.wake
def recording_wake(self):
    # The handle, not Context.ok(): ok() takes the lock try_shutdown holds while it
    # calls this.
    wakes.append(self._context.handle.ok())
    plain_wake(self)
Executor.wake = recording_wake

class QuietNode(Node):
    def shutdown(self):  # run_nodes calls it once spin has returned
        print(json.dumps({"context_valid_at_wake": wakes}), flush=True)

def make():
    node = QuietNode("quiet", start_parameter_services=False)
    node.create_service(CheckKey, "quiet_check", lambda request, response: response)
    print("ready", flush=True)
    return [node]

run_nodes("quiet", make)
"""


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_signal_ends_a_node_whose_executor_has_nothing_else_to_wake_it(
    stop_signal: signal.Signals, ros_env: dict[str, str], children: ChildProcesses
) -> None:
    for attempt in range(5):
        name = f"quiet_{attempt}"
        children.spawn(name, [sys.executable, "-c", QUIET_NODE], ros_env)
        wait_for(lambda n=name: "ready" in children.log(n), what=f"{name} to start")
        code = children.kill(name, stop_signal)  # fails the test if it does not exit
        assert code == 0, children.log(name)
        report = json.loads(
            next(line for line in children.log(name).splitlines() if "wake" in line)
        )
        wakes = report["context_valid_at_wake"]
        assert wakes, "the shutdown woke the executor"
        assert not any(wakes), f"woken while the context was still valid: {wakes}"


def test_signals_other_than_stop_signals_leave_a_node_serving(
    ros_env: dict[str, str], ros_context: Context, children: ChildProcesses
) -> None:
    # A SIGCHLD with a Python handler writes to the same wake-up fd as a SIGTERM does.
    script = "import signal\nsignal.signal(signal.SIGCHLD, lambda *_: None)\n" + QUIET_NODE
    client_node = Node("asker", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(client_node)
    client = client_node.create_client(CheckKey, "quiet_check")
    try:
        process = children.spawn("quiet", [sys.executable, "-c", script], ros_env)
        wait_for(lambda: "ready" in children.log("quiet"), what="the node to start")
        wait_for(client.service_is_ready, executor=executor, what="the service")
        for _ in range(3):
            process.send_signal(signal.SIGCHLD)
        ask_service(
            client,
            CheckKey.Request(client_id="c", idempotency_key="k"),
            executor=executor,
            what="an answer after SIGCHLD",
        )
        assert process.poll() is None
        assert children.kill("quiet", signal.SIGTERM) == 0
    finally:
        executor.shutdown()
        client_node.destroy_node()


def test_work_before_stop_runs_once_in_order_and_an_error_does_not_stop_the_rest() -> None:
    from fleet_idempotency.ros.stop_signals import before_stop, run_before_stop

    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("cannot cancel")

    before_stop(lambda: ran.append("first"))
    before_stop(failing)
    take_back = before_stop(lambda: ran.append("taken back"))
    before_stop(lambda: ran.append("last"))
    take_back()
    run_before_stop()
    run_before_stop()  # once: a second stop signal finds nothing left to do
    assert ran == ["first", "failing", "last"]
