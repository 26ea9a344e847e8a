"""The ``ros_action`` backend: a robot driven through ROS 2 action servers, one goal per key.

Action servers do not deduplicate: Nav2's accept any goal and let a new one pre-empt the
running one (a re-sent goal restarts the motion), servers forget a finished goal after
their result timeout (then its UUID is a new goal), and an rclcpp server on Jazzy given a
UUID it holds terminates (ros2/rclcpp#3120). So this backend stands the idempotency key
between the fleet and the server:

- the goal UUID is derived from the robot key (``goals.goal_uuid``); the key is claimed
  durably before ``execute``, so the UUID is stored before ``send_goal`` in the only sense
  that matters: a restarted agent recomputes it;
- ``execute`` runs once per key (duplicates are answered from the agent's store) and sends
  the goal once; a goal whose acceptance is not heard is asked for by UUID, never resent;
- after an agent crash, ``reconcile`` asks the server by UUID (``reconciles_after_crash``):
  finished -> its outcome; still running -> wait; unknown -> INTERRUPTED, never resent;
- ``prepare`` refuses with 503, before anything is stored for good, when the command's
  action server is not available, and with 400 when the goal cannot be built;
- at shutdown a running goal is canceled or left running, per command type
  (``ActionMapping.on_shutdown``; by default the agent's recovery policy of the type:
  resume leaves it running, to be reconciled; interrupt cancels it).
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from fleet_idempotency.commands import MOVE_TO_WAYPOINT
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.backend import (
    BackendContext,
    Command,
    CommandRefused,
    ExecutionAborted,
    ExecutionFailed,
    OutcomeUnknown,
    Readiness,
    RobotBackend,
)
from fleet_idempotency.ros.stop_signals import before_stop

from .config import ActionMapping, RosActionParams
from .goals import (
    GoalError,
    Target,
    TargetUnknown,
    build_goal,
    check_mapping,
    command_sources,
    goal_uuid,
    interpret,
    resolve_target,
)

NOT_READY = 503
# Until one of its action servers has been seen, the robot's stack is not up: the agent
# refuses new commands with 503 and says what it waits for. Once one has been, each
# command's own server is checked by ``prepare``.
SERVER_POLL_S = 0.2
WAIT_REPORT_PERIOD_S = 30.0


class RosActionBackend(RobotBackend):
    """A robot behind ROS 2 action servers (backend ``ros_action``)."""

    interface_version = 1
    Params: ClassVar[type[BaseModel]] = RosActionParams
    reconciles_after_crash: ClassVar[bool] = True

    def __init__(self, context: BackendContext, params: BaseModel) -> None:
        super().__init__(context, params)
        if context.node is None:
            raise ValueError("the ros_action backend talks ROS: it needs the agent's node")
        assert isinstance(params, RosActionParams)
        self.settings = params
        self._layout = _layout(params.fleet_file)
        # Imported here, not at module level: the module is importable (and its logic
        # testable) without rclpy.
        from .ros_link import load_action_type  # noqa: PLC0415

        self._types: dict[str, Any] = {}
        for command_type, mapping in params.actions.items():
            action_type = load_action_type(mapping.action_type)
            check_mapping(command_type, mapping, action_type.Goal(), action_type.Result())
            self._types[command_type] = action_type
        self._on_shutdown = {
            command_type: self._shutdown_policy(command_type, mapping)
            for command_type, mapping in params.actions.items()
        }
        self._link: Any = None
        self._clients: dict[str, Any] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._current: tuple[str, uuid.UUID] | None = None
        self._pose = context.start_pose
        self._ready = threading.Event()
        self._take_back_stop_hook: Any = None

    def _shutdown_policy(self, command_type: str, mapping: ActionMapping) -> str:
        if mapping.on_shutdown != "policy":
            return mapping.on_shutdown
        node = self.context.node
        policy = ""
        for name in (f"recovery_policy_by_type.{command_type}", "default_recovery_policy"):
            if not policy and node.has_parameter(name):
                policy = str(node.get_parameter(name).value or "")
        return "leave" if policy == "resume" else "cancel"

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        from .ros_link import SHARED_NAME, ActionLink  # noqa: PLC0415

        node = self.context.node
        link = self.context.shared.acquire(
            SHARED_NAME, lambda: ActionLink(node.context), ActionLink.close
        )
        clients = {
            command_type: link.client(self._types[command_type], self._name(mapping))
            for command_type, mapping in self.settings.actions.items()
        }
        with self._lock:
            if self._stop.is_set():
                self.context.shared.release(SHARED_NAME)
                return
            self._link, self._clients = link, clients
        # SIGTERM shuts the context down before the agent's shutdown runs: a goal is
        # canceled before that, while DDS still works.
        self._take_back_stop_hook = before_stop(self._settle_running_goal)
        threading.Thread(
            target=self._wait_for_a_server, name=f"{self.robot_id}-action-servers", daemon=True
        ).start()

    def _waiting_for(self) -> str:
        names = sorted({self._name(m) for m in self.settings.actions.values()})
        return f"its action server ({' or '.join(names)})"

    def _wait_for_a_server(self) -> None:
        started = time.monotonic()
        report_at = started + 2.0
        while not self._stop.is_set():
            if any(client.server_is_ready() for client in self._clients.values()):
                if time.monotonic() > started + 2.0:
                    self.context.logger.info("an action server answers")
                self._ready.set()
                self.context.on_ready_change()
                return
            if time.monotonic() >= report_at:
                self.context.logger.warning(
                    f"waiting for {self._waiting_for()}; commands refused until then"
                )
                report_at = time.monotonic() + WAIT_REPORT_PERIOD_S
            self._stop.wait(SERVER_POLL_S)

    def readiness(self) -> Readiness:
        return Readiness(True) if self._ready.is_set() else Readiness(False, self._waiting_for())

    def supported_commands(self) -> frozenset[str]:
        return frozenset(self.settings.actions)

    def pose(self) -> Pose:
        return self._pose

    def shutdown(self) -> None:
        from .ros_link import SHARED_NAME  # noqa: PLC0415

        self._settle_running_goal()
        with self._lock:
            link = self._link
            self._link = None
        if self._take_back_stop_hook is not None:
            self._take_back_stop_hook()
        if link is not None:
            self.context.shared.release(SHARED_NAME)

    def _settle_running_goal(self) -> None:
        """Stop waiting, and cancel the running goal or leave it running, per its command
        type; once (at a stop signal, or at shutdown without one)."""
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
            current, link = self._current, self._link
        if current is not None and link is not None:
            command_type, goal_id = current
            if not self.context.node.context.ok():
                self.context.logger.warning(
                    f"shutdown: goal {goal_id} not canceled (ROS already shut down); "
                    "the next start reconciles it"
                )
            elif self._on_shutdown[command_type] == "cancel":
                mapping = self.settings.actions[command_type]
                try:
                    canceling = link.cancel(
                        self._clients[command_type],
                        self._types[command_type],
                        goal_id,
                        self.settings.cancel_timeout_s,
                    )
                except Exception as error:  # shutting down: report, never raise
                    canceling = False
                    self.context.logger.error(f"could not cancel goal {goal_id}: {error!r}")
                self.context.logger.info(
                    f"shutdown: {'canceled' if canceling else 'could not cancel'} "
                    f"{self._name(mapping)} goal {goal_id}; the next start reconciles it"
                )
            else:
                self.context.logger.info(
                    f"shutdown: left goal {goal_id} running; the next start reconciles it"
                )

    # --- commands ---------------------------------------------------------------------------
    def prepare(self, command: Command) -> None:
        mapping = self._mapping(command)
        self._goal(command, mapping)  # refuses what cannot be built
        client = self._clients.get(command.command_type)
        if client is None or not client.server_is_ready():
            raise CommandRefused(
                f"{self.robot_id} cannot reach its action server {self._name(mapping)} "
                "(not available); retry later",
                NOT_READY,
            )

    def execute(self, command: Command) -> dict[str, Any]:
        from .ros_link import Sent  # noqa: PLC0415

        mapping = self._mapping(command)
        goal, target = self._goal(command, mapping)
        goal_id = goal_uuid(self.robot_id, command.key)
        name = self._name(mapping)
        with self._lock:
            if self._stop.is_set():
                raise ExecutionAborted(f"{command.key!r}: stopped before its goal was sent")
            self._current = (command.command_type, goal_id)
        try:
            # The one send_goal of this key: nothing below sends it again.
            sent = self._link.send_goal(
                self._clients[command.command_type],
                goal,
                goal_id,
                self.settings.accept_timeout_s,
                self._stop,
            )
            if sent == Sent.REJECTED:
                raise ExecutionFailed(
                    f"{name} rejected goal {goal_id}: nothing was done; the key is spent "
                    "(its goal was sent): submit again under a new key",
                    mapping.outcomes.refused_status_code,
                )
            if sent == Sent.NO_ANSWER and not self._stop.is_set():
                self.context.logger.warning(
                    f"{name} did not answer goal {goal_id} in {self.settings.accept_timeout_s:g} "
                    "s; asking for it by UUID (it is never sent twice)"
                )
            body = self._await(command, mapping, goal_id)
        finally:
            with self._lock:
                self._current = None
        if target is not None and command.command_type == MOVE_TO_WAYPOINT:
            self._pose = Pose(x=target.x, y=target.y, theta=target.theta)
        return body

    def reconcile(self, command: Command) -> dict[str, Any]:
        """A key the dead agent process had claimed: its goal, asked for by UUID."""
        mapping = self.settings.actions.get(command.command_type)
        if mapping is None or command.command_type not in self._clients:
            raise OutcomeUnknown(f"no action is configured for {command.command_type} any more")
        goal_id = goal_uuid(self.robot_id, command.key)
        with self._lock:
            if self._stop.is_set():
                raise ExecutionAborted(f"{command.key!r}: stopped before reconciling")
            self._current = (command.command_type, goal_id)
        try:
            return self._await(command, mapping, goal_id)
        finally:
            with self._lock:
                self._current = None

    def _await(
        self, command: Command, mapping: ActionMapping, goal_id: uuid.UUID
    ) -> dict[str, Any]:
        name = self._name(mapping)
        finished = self._link.result_by_uuid(
            self._clients[command.command_type],
            self._types[command.command_type],
            name,
            goal_id,
            stop=self._stop,
            poll_s=self.settings.result_poll_s,
            timeout_s=mapping.timeout_s,
        )
        if finished is None and self._stop.is_set():
            raise ExecutionAborted(f"{command.key!r}: goal {goal_id} left to the next start")
        if finished is None:
            self._link.cancel(
                self._clients[command.command_type],
                self._types[command.command_type],
                goal_id,
                self.settings.cancel_timeout_s,
            )
            raise OutcomeUnknown(
                f"{name} gave no result for goal {goal_id} within {mapping.timeout_s:g} s; "
                "cancel requested, not sent again"
            )
        return interpret(
            finished.status, finished.result, mapping, action_name=name, goal_id=goal_id
        )

    # --- helpers ----------------------------------------------------------------------------
    def _mapping(self, command: Command) -> ActionMapping:
        mapping = self.settings.actions.get(command.command_type)
        if mapping is None:
            raise CommandRefused(f"{self.robot_id} has no action for {command.command_type}")
        return mapping

    def _goal(self, command: Command, mapping: ActionMapping) -> tuple[Any, Target | None]:
        try:
            target = resolve_target(command, self._layout)
            sources = command_sources(
                command,
                goal_id=goal_uuid(self.robot_id, command.key),
                frame_id=self.settings.frame_id,
                target=target,
            )
            goal = build_goal(self._types[command.command_type].Goal(), mapping, sources)
        except (TargetUnknown, GoalError) as error:
            raise CommandRefused(str(error)) from None
        return goal, target

    def _name(self, mapping: ActionMapping) -> str:
        return self.settings.resolved_name(mapping)


def _layout(fleet_file: str) -> WorldConfig | None:
    if not fleet_file:
        return None
    return load_fleet(Path(fleet_file).expanduser()).world
