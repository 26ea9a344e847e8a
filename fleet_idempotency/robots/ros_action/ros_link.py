"""The ``ros_action`` backend's ROS wiring: action clients on a side node of the process.

One side node and one executor thread per agent process (shared by its robots through
``BackendContext.shared``), not the agent's own node: the agent's executor may be one an
``agent_host`` shares between many robots, and a backend must never block it.

rclpy's ``ActionClient`` is not thread-safe: a response taken by the executor before the
request's future is registered is dropped as "unexpected". So every request is made on
the executor's own thread (``call``); the agent's worker thread only waits on events.

By UUID, without having sent the goal in this process (``result_by_uuid``, ``cancel``):
rclpy's ``ClientGoalHandle`` is built for the stored UUID and asked for its result: an
rclpy or rclcpp server answers at once with STATUS_UNKNOWN for a goal it does not hold,
and when the goal ends for one it holds. A pending request is lost with the server
process that had it, so it is asked again when another process serves the action (its
status publisher changes) and every ``result_poll_s``.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from action_msgs.srv import CancelGoal
from rclpy.action import ActionClient
from rclpy.action.client import ClientGoalHandle
from rclpy.context import Context
from unique_identifier_msgs.msg import UUID

from fleet_idempotency.ros.qos import SERVICE_QOS
from fleet_idempotency.ros.side_thread import side_node, spin_on_thread

SHARED_NAME = "ros_action_link"
CALL_TIMEOUT_S = 5.0
WAKE_S = 0.2


def load_action_type(name: str) -> Any:
    """``pkg/action/Type`` -> the generated class; ValueError naming what is missing."""
    package, _, type_name = name.partition("/action/")
    try:
        module = importlib.import_module(f"{package}.action")
    except Exception as error:
        raise ValueError(
            f"cannot load action type {name!r}: {error!r} (is {package} installed, and its "
            "environment sourced?)"
        ) from None
    action = getattr(module, type_name, None)
    if action is None or not hasattr(action, "Impl"):
        raise ValueError(f"cannot load action type {name!r}: {package}.action has no {type_name}")
    return action


class Sent:
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    NO_ANSWER = "no_answer"


@dataclass(frozen=True)
class Finished:
    status: int
    result: Any


class ActionLink:
    """A process's side node for action clients, spun by a thread of its own."""

    def __init__(self, context: Context) -> None:
        self.node = side_node("ros_action_clients", context)
        self._executor = spin_on_thread(self.node, "ros-action-clients")
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()

    def call(self, work: Callable[[], Any], timeout_s: float = CALL_TIMEOUT_S) -> Any:
        """``work()`` on the executor's thread; its return value."""
        task = self._executor.create_task(work)
        done = threading.Event()
        task.add_done_callback(lambda _task: done.set())
        if not done.wait(timeout_s):
            raise TimeoutError("the action clients' executor did not run the request")
        return task.result()

    def client(self, action_type: Any, name: str) -> Any:
        """The action client of ``name`` (one per type and name in the process)."""
        with self._lock:
            found = self._clients.get((name, repr(action_type)))
            if found is not None:
                return found
            made = self.call(
                lambda: ActionClient(
                    self.node,
                    action_type,
                    name,
                    goal_service_qos_profile=SERVICE_QOS,
                    result_service_qos_profile=SERVICE_QOS,
                    cancel_service_qos_profile=SERVICE_QOS,
                )
            )
            self._clients[(name, repr(action_type))] = made
            return made

    def server_processes(self, name: str) -> frozenset[bytes]:
        """The endpoints publishing the action's status: one per server process."""
        infos = self.node.get_publishers_info_by_topic(f"{name}/_action/status")
        return frozenset(bytes(info.endpoint_gid) for info in infos)

    # --- goals ------------------------------------------------------------------------------
    def send_goal(
        self, client: Any, goal: Any, goal_id: uuid.UUID, timeout_s: float, stop: threading.Event
    ) -> str:
        """Send ``goal`` under ``goal_id`` once; whether the server accepted it, rejected
        it, or did not answer in ``timeout_s`` (it may hold it: ask by UUID, never resend)."""
        future = self.call(
            lambda: client.send_goal_async(goal, goal_uuid=UUID(uuid=list(goal_id.bytes)))
        )
        if not _wait(future, timeout_s, stop):
            return Sent.NO_ANSWER
        handle = future.result()
        return Sent.ACCEPTED if handle.accepted else Sent.REJECTED

    def result_by_uuid(
        self,
        client: Any,
        action_type: Any,
        name: str,
        goal_id: uuid.UUID,
        *,
        stop: threading.Event,
        poll_s: float,
        timeout_s: float | None,
    ) -> Finished | None:
        """Wait for the goal's end; None if ``stop`` is set or ``timeout_s`` passed."""
        handle = _handle(client, action_type, goal_id)
        woken = threading.Event()
        asked: list[Any] = []
        servers: frozenset[bytes] = frozenset()
        asked_at = -poll_s
        give_up = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while not stop.is_set():
                now = time.monotonic()
                current = self.server_processes(name)
                if current - servers or now - asked_at >= poll_s:
                    future = self.call(handle.get_result_async)
                    future.add_done_callback(lambda _f: woken.set())
                    asked.append(future)
                    servers, asked_at = current, now
                done = next((f for f in asked if f.done()), None)
                if done is not None:
                    response = done.result()
                    return Finished(int(response.status), response.result)
                if give_up is not None and now >= give_up:
                    return None
                woken.wait(WAKE_S)
                woken.clear()
            return None
        finally:
            self._forget(client, [f for f in asked if not f.done()])

    def cancel(self, client: Any, action_type: Any, goal_id: uuid.UUID, timeout_s: float) -> bool:
        """Ask the server to cancel the goal; whether it said it is canceling it."""
        future = self.call(_handle(client, action_type, goal_id).cancel_goal_async)
        if not _wait(future, timeout_s, threading.Event()):
            return False
        response = future.result()
        return bool(
            response.return_code == CancelGoal.Response.ERROR_NONE and response.goals_canceling
        )

    def _forget(self, client: Any, futures: list[Any]) -> None:
        """Drop requests no answer will come for (their server went)."""
        if not futures:
            return

        def forget() -> None:
            for future in futures:
                client._remove_pending_result_request(future)

        with contextlib.suppress(TimeoutError, AttributeError):
            self.call(forget, timeout_s=1.0)


def _handle(client: Any, action_type: Any, goal_id: uuid.UUID) -> Any:
    """A goal handle for a UUID this process may not have sent (``result_by_uuid``)."""
    response = action_type.Impl.SendGoalService.Response(accepted=True)
    return ClientGoalHandle(client, UUID(uuid=list(goal_id.bytes)), response)


def _wait(future: Any, timeout_s: float, stop: threading.Event) -> bool:
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    deadline = time.monotonic() + timeout_s
    while not done.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0 or stop.is_set():
            return bool(future.done())
        done.wait(min(WAKE_S, remaining))
    return True
