"""The ROS shell of the ExecuteCommand action (``<api_namespace>/execute_command``).

The logic is ``execute_goals.py``. The server lives on a side node with a multi-threaded
executor of its own: each goal waits for its command's end on a thread of that pool, and
goals must never take the threads that serve submits, status checks or results (the
orchestrator's main executor). Its services get the package's deep request history
(``SERVICE_QOS``): twenty goals sent at once by one client would overflow rclpy's default
depth of 10, and DDS would drop the oldest requests.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.context import Context
from rclpy.executors import MultiThreadedExecutor

from fleet_idempotency.action import ExecuteCommand
from fleet_idempotency.orchestrator.core import OrchestratorCore, SubmitRequest
from fleet_idempotency.orchestrator.execute_goals import Ending, ExecuteGoals
from fleet_idempotency.protocol import WITHDRAWN
from fleet_idempotency.ros.qos import RELIABLE_TOPIC_QOS, SERVICE_QOS
from fleet_idempotency.ros.side_thread import side_node, start_serving_thread
from fleet_idempotency.store import State

# Goals that may wait for their command at once; threads beyond them serve the action's
# own requests (new goals, cancels, result requests).
MAX_WAITING_GOALS = 48
SPARE_THREADS = 4
# How long a finished goal's result stays with the server for a client's get_result.
RESULT_TIMEOUT_S = 900
# rclpy moves a goal to CANCELING only after its cancel callback returned; a goal whose
# command was withdrawn by that callback waits this long at most for it (microseconds).
CANCELING_WAIT_S = 2.0


class ExecuteCommandServer:
    def __init__(
        self,
        context: Context,
        core: OrchestratorCore,
        *,
        name: str,
        kick: Any,
        logger: Any,
    ) -> None:
        self.goals = ExecuteGoals(core, kick=kick, max_waiting=MAX_WAITING_GOALS)
        self._log = logger
        # Goals whose cancel withdrew their command (by goal UUID), until they end.
        self._withdrawn_by: set[bytes] = set()
        self._lock = threading.Lock()
        self.node = side_node("orchestrator_execute_command", context)
        self.server = ActionServer(
            self.node,
            ExecuteCommand,
            name,
            execute_callback=self._execute,
            goal_callback=lambda _goal: GoalResponse.ACCEPT,
            cancel_callback=self._cancel,
            callback_group=ReentrantCallbackGroup(),
            goal_service_qos_profile=SERVICE_QOS,
            result_service_qos_profile=SERVICE_QOS,
            cancel_service_qos_profile=SERVICE_QOS,
            # One topic carries every goal's feedback: a burst of goals must not drop any.
            feedback_pub_qos_profile=RELIABLE_TOPIC_QOS,
            result_timeout=RESULT_TIMEOUT_S,
        )
        self.executor = MultiThreadedExecutor(
            num_threads=MAX_WAITING_GOALS + SPARE_THREADS, context=context
        )
        self.executor.add_node(self.node)
        self._thread = start_serving_thread(self.executor, "execute-command-action")

    def _execute(self, goal_handle: Any) -> Any:
        goal = goal_handle.request
        request = SubmitRequest(
            client_id=goal.client_id,
            key=goal.idempotency_key,
            robot_id=goal.robot_id,
            command_type=goal.command_type,
            payload_json=goal.payload_json,
        )

        def feedback(state: State, status_code: int, message: str) -> None:
            goal_handle.publish_feedback(
                ExecuteCommand.Feedback(state=int(state), status_code=status_code, message=message)
            )

        try:
            outcome = self.goals.run(
                request, feedback, cancel_requested=lambda: goal_handle.is_cancel_requested
            )
        except Exception as error:  # the goal must end with an answer, never a traceback
            self._log.error(f"execute_command: unexpected {error!r}")
            goal_handle.abort()
            return ExecuteCommand.Result(
                state=int(State.UNKNOWN),
                status_code=500,
                message=f"unexpected error: {error}; send the goal again with the same key "
                "or use the status check",
            )
        answer = outcome.answer
        goal_id = bytes(goal_handle.goal_id.uuid)
        with self._lock:
            withdrawn_by_this_goal = goal_id in self._withdrawn_by
            self._withdrawn_by.discard(goal_id)
        if withdrawn_by_this_goal:
            # Its own cancel withdrew the command: end it CANCELED once rclpy has moved it
            # to CANCELING (just after the cancel callback returned).
            deadline = time.monotonic() + CANCELING_WAIT_S
            while not goal_handle.is_cancel_requested and time.monotonic() < deadline:
                time.sleep(0.005)
        try:
            if outcome.ending is Ending.SUCCEEDED:
                goal_handle.succeed()
            elif answer.status_code == WITHDRAWN and goal_handle.is_cancel_requested:
                goal_handle.canceled()
            else:
                goal_handle.abort()
        except Exception as error:  # the context went away under a waiting goal (shutdown)
            if self.node.context.ok():
                raise
            self._log.info(f"execute_command: goal not ended at shutdown ({error!r})")
        return ExecuteCommand.Result(
            state=int(answer.state),
            status_code=answer.status_code,
            replayed=answer.replayed,
            result_json=answer.result_json,
            message=answer.message,
        )

    def _cancel(self, goal_handle: Any) -> CancelResponse:
        goal = goal_handle.request
        goal_id = bytes(goal_handle.goal_id.uuid)
        with self._lock:
            self._withdrawn_by.add(goal_id)
        withdrawal = self.goals.cancel(goal.client_id, goal.idempotency_key)
        if withdrawal.withdrawn:
            return CancelResponse.ACCEPT
        with self._lock:
            self._withdrawn_by.discard(goal_id)
        # A cancel response carries no reason: the goal's feedback does.
        progress = self.goals.core.progress(goal.client_id, goal.idempotency_key)
        goal_handle.publish_feedback(
            ExecuteCommand.Feedback(
                state=int(progress.state if progress else State.IN_PROGRESS),
                status_code=progress.status_code if progress else 409,
                message=f"cancel refused: {withdrawal.message}",
            )
        )
        return CancelResponse.REJECT

    def close(self) -> None:
        self.goals.stop()
        self.executor.shutdown(timeout_sec=2.0)
        self.server.destroy()
        self.node.destroy_node()
