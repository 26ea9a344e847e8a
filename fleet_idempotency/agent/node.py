"""Agent-driver node: runs onboard one robot, executes each idempotency key at most once.

Run in the robot's namespace, e.g.::

    ros2 run fleet_idempotency agent_driver --ros-args -r __ns:=/fleet/forklift_1 \\
        -p robot_id:=forklift_1 -p robot_type:=forklift -p store_dir:=/var/lib/fleet

Topics (relative to the namespace): ``commands`` (FleetCommand, in), ``status``
(RobotStatus, out); service ``check_key`` (CheckKey); results go to ``/fleet/results``
(parameter ``results_topic``). All logic lives in AgentCore; this is the ROS shell.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from fleet_idempotency.agent.core import AgentCore
from fleet_idempotency.agent.dedup_window import RecentDeliveries
from fleet_idempotency.agent.delayed_acks import DelayedAcks
from fleet_idempotency.agent.diagnostics import PERIOD_S as DIAGNOSTICS_PERIOD_S
from fleet_idempotency.agent.diagnostics import DiagnosticsPublisher, StoreDiagnostics
from fleet_idempotency.agent.periodic import PeriodicWork
from fleet_idempotency.agent.status_throttle import StatusThrottle
from fleet_idempotency.auth import CommandVerifier, KeyringError, RobotKeyring, WatchedKeyring
from fleet_idempotency.commands import COMMAND_TYPES
from fleet_idempotency.geometry import Pose
from fleet_idempotency.msg import CommandResult, FleetCommand, RobotStatus
from fleet_idempotency.protocol import Answer
from fleet_idempotency.robots.backend import BackendContext, RobotBackend
from fleet_idempotency.robots.registry import BackendError, load_backend_class, make_backend
from fleet_idempotency.robots.shared import SharedResources
from fleet_idempotency.ros.convert import (
    answer_to_msg,
    check_key_failed,
    delivery_from_msg,
    fill_check_key_response,
)
from fleet_idempotency.ros.guard import CallbackGuard
from fleet_idempotency.ros.node_main import run_nodes
from fleet_idempotency.ros.qos import (
    RELIABLE_TOPIC_QOS,
    SERVICE_QOS,
    STATUS_QOS,
    drop_default_event_handlers,
)
from fleet_idempotency.ros.side_thread import side_node, spin_on_thread
from fleet_idempotency.srv import CheckKey
from fleet_idempotency.store import IdempotencyStore, State, StoreConfig

# The periodic jobs of a process's agents run together on this grid (agent/periodic.py):
# heartbeats then cost a few wake-ups a second, not one per agent.
WORK_BATCH_S = 0.25


class AgentProcessWork:
    """What the agents of one process share: their periodic jobs, run by one timer, one
    /diagnostics publisher carrying every agent's status (see agent/periodic.py), and the
    resources their backends share (``robots/shared.py``, e.g. one link to a simulator).
    ``timer=False``: no timer; the process's event loop runs ``work.run_if_due``."""

    def __init__(self, *, timer: bool = True) -> None:
        self._with_timer = timer
        self.work = PeriodicWork(batch_s=WORK_BATCH_S)
        self.diagnostics: list[StoreDiagnostics] = []
        self.timer: Any = None
        self.resources = SharedResources()
        self._users = 0
        self._delayed_acks: dict[float, DelayedAcks] = {}
        self._services: tuple[Node, SingleThreadedExecutor] | None = None
        self.warned_unauthenticated = False
        self._results_publishers: dict[str, Any] = {}

    def join(self) -> None:
        """One more agent of the process; ``release`` of the last closes what they share."""
        self._users += 1

    def delayed_acks(self, delay_s: float, logger: Any) -> DelayedAcks | None:
        """The process's holder of 202s for ``delay_s`` (None for 0: no delay)."""
        if delay_s <= 0:
            return None
        if delay_s not in self._delayed_acks:
            self._delayed_acks[delay_s] = DelayedAcks(
                delay_s, on_error=lambda error: logger.error(f"could not publish a 202: {error!r}")
            )
        return self._delayed_acks[delay_s]

    def services_node(self, context: Context) -> Node:
        """The node on which the agents of a host serve their check_key, spun by its own
        thread: in the host's one wait set, 25 services (rarely called, for
        reconciliation) were half of what every command's wake-up walked."""
        if self._services is None:
            node = side_node("agent_host_services", context)
            self._services = (node, spin_on_thread(node, "agent-host-services"))
        return self._services[0]

    def results_publisher(self, context: Context, topic: str) -> Any:
        """One publisher of results per topic for all the agents of a host, on its
        services node: one DDS writer per robot was a seventh of a host's endpoints, each
        discovered and matched by every other process of the domain."""
        if topic not in self._results_publishers:
            self._results_publishers[topic] = self.services_node(context).create_publisher(
                CommandResult, topic, RELIABLE_TOPIC_QOS
            )
        return self._results_publishers[topic]

    def release(self) -> None:
        """One agent of the process is done with the held answers, services node and
        backend resources they share."""
        self._users -= 1
        if self._users > 0:
            return
        for held in self._delayed_acks.values():
            held.close()
        if self._services is not None:
            node, executor = self._services
            executor.shutdown(timeout_sec=1.0)
            node.destroy_node()
            self._services = None
            self._results_publishers.clear()
        self.resources.close_all()

    def start(self, node: Node) -> None:
        """Create the process's one timer (and its /diagnostics publisher) on ``node``,
        once every agent of the process has added its jobs."""
        if self.diagnostics:
            publisher = DiagnosticsPublisher(node)
            publisher.sources = self.diagnostics
            self.work.every(DIAGNOSTICS_PERIOD_S, publisher.publish, name="diagnostics")
        if self._with_timer:
            tick_s = self.work.tick_s()
            self.timer = node.create_timer(tick_s, lambda: self.work.run_due(tick_s))


class AgentDriver(Node):
    def __init__(
        self,
        *,
        process_work: AgentProcessWork | None = None,
        qos_event_handlers: bool = True,
        **kwargs: Any,
    ) -> None:
        """``process_work``: shared with the other agents of this process (agent_host),
        which then starts it; without it the agent has its own and starts it itself.
        ``qos_event_handlers=False``: none of rclpy's default QoS event handlers (they only
        log an incompatible peer) on the agent's topics, dropped once they all exist
        (ros/qos.py); a host of 25 agents saves 200 entities that every wake-up of its
        executor walks."""
        super().__init__("agent_driver", **kwargs)
        own_work = process_work is None
        shared = AgentProcessWork() if process_work is None else process_work
        p = self._declare_parameters()
        self.robot_id: str = p["robot_id"]
        self._drop_probability = float(p["result_drop_probability"])
        self._rng = random.Random(p["seed"] or None)
        self._process_work = shared
        self._said_ready = False
        self._started_line = ""  # set once the agent is built: see _report_ready
        # Everything that can refuse to start is checked before the backend opens anything.
        self._keyring = self._open_keyring(p["auth_keyring"])
        backend = self._make_backend(p, shared)
        self.store = IdempotencyStore.open(
            self._store_config(p, reconcile=type(backend).reconciles_after_crash)
        )
        shared.join()
        self._results = (
            self.create_publisher(CommandResult, p["results_topic"], RELIABLE_TOPIC_QOS)
            if own_work
            else shared.results_publisher(self.context, p["results_topic"])
        )
        # Answers found by crash recovery are held until someone listens: published at
        # start-up they would reach nobody, since discovery takes a moment.
        self._recovered: list[Answer] | None = []
        # Transient-local (STATUS_QOS): the first status, published below before anyone
        # matched, reaches the orchestrator as soon as it does, with a boot id it has not
        # seen; a restarted orchestrator gets the latest at once too.
        self._boot_id = uuid.uuid4().hex
        self._status = self.create_publisher(RobotStatus, "status", STATUS_QOS)
        self._status_throttle = StatusThrottle(
            p["status_min_interval_s"], idle_period_s=p["idle_status_period_s"]
        )
        self._heartbeat_slack_s = p["status_period_s"] / 2
        self.core = AgentCore(
            backend=backend,
            store=self.store,
            capacity=p["capacity"],
            publish=self._publish_answer,
            logger=self.get_logger(),
            on_load_change=self._load_changed,
            dedup_window=RecentDeliveries() if p["transport_dedup"] else None,
            verifier=CommandVerifier(self._keyring.keyring) if self._keyring else None,
            delayed_acks=shared.delayed_acks(p["ack_delay_s"], self.get_logger()),
        )
        guard = CallbackGuard(
            self.get_logger(), self.core.counters, shutting_down=lambda: not self.context.ok()
        )
        # Commands are handled one at a time (claims serialise anyway); status checks and
        # timers get their own groups so they are answered while a claim is being synced.
        self.create_subscription(
            FleetCommand,
            "commands",
            guard.topic("commands", self._on_command),
            RELIABLE_TOPIC_QOS,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        # Hosted agents serve it from the host's services node, under the same name.
        service_owner = self if own_work else shared.services_node(self.context)
        service_owner.create_service(
            CheckKey,
            "check_key" if own_work else f"{self.get_namespace().rstrip('/')}/check_key",
            guard.service("check_key", self._on_check_key, check_key_failed),
            qos_profile=SERVICE_QOS,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        # No timers of its own: the process's one timer runs these (agent/periodic.py).
        work = shared.work
        work.every(p["status_period_s"], guard.timer("status", self._heartbeat), name="status")
        work.every(p["gc_period_s"], guard.timer("gc", self._collect_garbage), name="gc")
        if self._keyring is not None:
            work.every(
                p["auth_reload_period_s"],
                guard.timer("auth_reload", self._reload_keyring),
                name="auth_reload",
            )
        elif not shared.warned_unauthenticated:
            # Once per process: a host of 1,000 agents said it 1,000 times.
            shared.warned_unauthenticated = True
            self.get_logger().warning(
                "no auth_keyring: commands are not authenticated, any DDS participant on "
                "this domain can command this robot (and any other of this process without one)"
            )
        shared.diagnostics.append(
            StoreDiagnostics(self, self.robot_id, self.store, self.core.counters, guard=guard)
        )
        # Started before the worker, which may hold a command resumed after a crash: the
        # backend opens what it needs first; its waiting (a simulator or a controller not
        # up yet) happens in the background and never holds up start-up.
        backend.start()
        self.core.start()
        # Checked at the heartbeat's pace: a subscriber is matched within a period or two.
        self._announce_job = work.every(
            p["status_period_s"],
            guard.timer("announce_recovered", self._announce_recovered),
            name="announce_recovered",
        )
        self._announce_deadline = self.get_clock().now().nanoseconds + 30 * 10**9
        if own_work:
            shared.start(self)
        if not qos_event_handlers:
            drop_default_event_handlers(self)
        self._publish_status()
        self._started_line = (
            f"{p['robot_type']} {self.robot_id}: store {self.store.config.path}, backend "
            f"{p['backend']!r}, capacity {p['capacity']}, recovered "
            f"{len(self.store.last_recovery.resumed)} resumed / "
            f"{len(self.store.last_recovery.interrupted)} interrupted / "
            f"{len(self.store.last_recovery.reconciling)} to reconcile"
        )
        readiness = backend.readiness()
        if not readiness.ready:
            self.get_logger().info(
                f"{self._started_line}; waiting for {readiness.waiting_for} before taking "
                "commands (CheckKey is served meanwhile)"
            )
        self._report_ready()

    def _report_ready(self) -> None:
        """Say once that the robot takes commands (tools and tests wait for this line)."""
        if self._said_ready or not self._started_line or not self.core.backend.readiness().ready:
            return
        self._said_ready = True
        self.get_logger().info(self._started_line.replace(": store ", " ready: store ", 1))

    def _backend_ready_changed(self) -> None:
        self._load_changed(force=True)
        self._report_ready()

    def _declare_parameters(self) -> dict[str, Any]:
        defaults: dict[str, Any] = {
            "robot_id": "robot_1",
            "robot_type": "amr",
            # An entry point of group fleet_idempotency.robot_backends, or module:Class
            # (robots/registry.py); its parameters are backend_params.<name>.
            "backend": "simulated",
            "store_dir": str(Path.home() / ".ros" / "fleet_idempotency"),
            "capacity": 4,
            # Where the fleet file says the robot starts (a backend may read its own).
            "start_x": 0.0,
            "start_y": 0.0,
            "start_theta": 0.0,
            "retention_s": 86_400.0,
            "tombstone_retention_s": 7 * 86_400.0,
            "expired_key_policy": "reject",
            "default_recovery_policy": "interrupt",
            "store_map_size_max_mb": 1024,
            "durable": True,
            "gc_period_s": 60.0,
            # The heartbeat while the robot holds work; an idle robot's is sent every
            # idle_status_period_s only (its liveliness is DDS's: ros/qos.py).
            "status_period_s": 1.0,
            "idle_status_period_s": 10.0,
            # A load change is published at once only if the last status is older than this.
            "status_min_interval_s": 0.2,
            # The 202 of a command the idle robot starts at once waits this long, and is
            # not sent if the final result goes first (agent/delayed_acks.py); 0: never.
            "ack_delay_s": 0.05,
            "transport_dedup": True,
            "results_topic": "/fleet/results",
            # Fault injection for tests and demos: lose this fraction of outgoing results,
            # as a lossy link would. Seeded for reproducible runs (0: random seed).
            "result_drop_probability": 0.0,
            "seed": 0,
            # This robot's keyring (auth/keyring.py): only commands signed with one of its
            # keys are executed. Empty: unauthenticated (development, single-user machines).
            "auth_keyring": "",
            "auth_reload_period_s": 5.0,
        }
        # Per-command-type overrides, e.g. retention_s_by_type.pick: 3600.0 in a params file;
        # a negative retention or an empty policy means "use the default".
        for command_type in COMMAND_TYPES:
            defaults[f"retention_s_by_type.{command_type}"] = -1.0
            defaults[f"recovery_policy_by_type.{command_type}"] = (
                "resume" if command_type == "move_to_waypoint" else ""
            )
        # In one call. (rclpy still publishes a /parameter_events message per parameter,
        # 36 per node: a fifth of a hosted agent's start-up, and not ours to change.)
        declared = self.declare_parameters("", list(defaults.items()))
        values = {parameter.name: parameter.value for parameter in declared}
        return values

    def _open_keyring(self, path: str) -> WatchedKeyring[RobotKeyring] | None:
        if not path:
            return None
        watched = WatchedKeyring(Path(path).expanduser(), RobotKeyring)
        if watched.keyring.robot_id != self.robot_id:
            raise KeyringError(
                f"keyring {path} belongs to {watched.keyring.robot_id!r}, not {self.robot_id!r}"
            )
        return watched

    def _make_backend(self, p: dict[str, Any], shared: AgentProcessWork) -> RobotBackend:
        """The backend named by ``backend``, its parameters read as ``backend_params.<name>``
        (declared from its pydantic model, so ``ros2 param`` lists them with defaults)."""
        name = p["backend"]
        backend_class = load_backend_class(name)
        values: dict[str, Any] = {}
        for field_name, field in backend_class.Params.model_fields.items():
            default = field.get_default(call_default_factory=True)
            if field.is_required() or not isinstance(default, bool | int | float | str):
                default = None  # required, optional or structured (as JSON)
            # Any type: the backend's model validates (an int for a float, "1.5" for a
            # number), and a wrong one is refused naming the field, not by rclpy.
            value = self.declare_parameter(
                f"backend_params.{field_name}",
                default,
                ParameterDescriptor(dynamic_typing=True),
            ).value
            if value is not None:
                values[field_name] = value
        unknown = sorted(
            name_[len("backend_params.") :]
            for name_ in getattr(self, "_parameter_overrides", {})
            if name_.startswith("backend_params.") and not self.has_parameter(name_)
        )
        if unknown:
            raise BackendError(
                f"backend {name!r} has no parameter(s) "
                + ", ".join(f"backend_params.{field}" for field in unknown)
                + f" (it takes: {', '.join(sorted(backend_class.Params.model_fields)) or 'none'})"
            )
        context = BackendContext(
            robot_id=self.robot_id,
            robot_type=p["robot_type"],
            logger=self.get_logger(),
            start_pose=Pose(x=p["start_x"], y=p["start_y"], theta=p["start_theta"]),
            node=self,
            shared=shared.resources,
            on_ready_change=self._backend_ready_changed,
            state_dir=Path(p["store_dir"]).expanduser() / self.robot_id / "backend",
        )
        return make_backend(name, values, context)

    def _reload_keyring(self) -> None:
        assert self._keyring is not None
        try:
            keyring = self._keyring.refresh()
        except KeyringError as error:
            self.get_logger().error(f"{error}; keeping the keys in force")
            return
        if keyring is not None and keyring.robot_id == self.robot_id:
            self.core.verifier = CommandVerifier(keyring)
            self.get_logger().info(f"keyring reloaded: keys {sorted(keyring.keys)}")

    def _store_config(self, p: dict[str, Any], *, reconcile: bool = False) -> StoreConfig:
        """``reconcile``: the backend can ask the robot what became of a command begun
        before a crash, which beats any per-type policy (robots/backend.py)."""
        retention = {
            command_type: float(p[f"retention_s_by_type.{command_type}"])
            for command_type in COMMAND_TYPES
            if float(p[f"retention_s_by_type.{command_type}"]) > 0
        }
        policies = {
            command_type: p[f"recovery_policy_by_type.{command_type}"]
            for command_type in COMMAND_TYPES
            if p[f"recovery_policy_by_type.{command_type}"]
        }
        return StoreConfig(
            path=Path(p["store_dir"]).expanduser() / self.robot_id,
            default_retention_s=p["retention_s"],
            retention_s_by_type=retention,
            tombstone_retention_s=p["tombstone_retention_s"],
            expired_key_policy=p["expired_key_policy"],
            default_recovery_policy="reconcile" if reconcile else p["default_recovery_policy"],
            recovery_policy_by_type={} if reconcile else policies,
            map_size_max=int(p["store_map_size_max_mb"]) * 1024 * 1024,
            durable=p["durable"],
        )

    # --- callbacks --------------------------------------------------------------------------
    def _on_command(self, message: FleetCommand) -> None:
        self.core.submit(delivery_from_msg(message))

    def _publish_answer(self, answer: Answer) -> None:
        if self._drop_probability and self._rng.random() < self._drop_probability:
            self.core.counters["injected_result_drops"] += 1
            return  # fault injection: lost on the way back, as on a lossy link
        if (
            self._recovered is not None
            and answer.state == State.INTERRUPTED
            and not answer.replayed
        ):
            self._recovered.append(answer)
            return
        self._results.publish(answer_to_msg(answer, self.get_clock().now().to_msg()))

    def _announce_recovered(self) -> None:
        listening = self._results.get_subscription_count() > 0
        if not listening and self.get_clock().now().nanoseconds < self._announce_deadline:
            return
        pending, self._recovered = self._recovered or [], None
        self._announce_job.cancel()
        for answer in pending:
            self._results.publish(answer_to_msg(answer, self.get_clock().now().to_msg()))

    def _on_check_key(
        self, request: CheckKey.Request, response: CheckKey.Response
    ) -> CheckKey.Response:
        return fill_check_key_response(self.core.check_key(request.idempotency_key), response)

    def _load_changed(self, force: bool = False) -> None:
        if self._status_throttle.on_change(idle=self.core.load().queue_depth == 0) or force:
            self._publish_status()

    def _heartbeat(self) -> None:
        idle = self.core.load().queue_depth == 0
        if self._status_throttle.heartbeat_due(idle, self._heartbeat_slack_s):
            self._publish_status()

    def _publish_status(self) -> None:
        load = self.core.load()
        pose = self.core.backend.pose()
        readiness = self.core.backend.readiness()
        self._status.publish(
            RobotStatus(
                robot_id=self.robot_id,
                robot_type=self.core.backend.robot_type,
                x=pose.x,
                y=pose.y,
                theta=pose.theta,
                queue_depth=load.queue_depth,
                capacity=load.capacity,
                busy=load.busy,
                current_key=load.current_key,
                last_finished_key=load.last_finished_key,
                boot_id=self._boot_id,
                ready=readiness.ready,
                waiting_for=readiness.waiting_for,
                stamp=self.get_clock().now().to_msg(),
            )
        )
        self._status_throttle.on_heartbeat()

    def _collect_garbage(self) -> None:
        report = self.core.collect_garbage(max_batches=4)
        if report.records_purged or report.tombstones_purged:
            self.get_logger().info(
                f"GC: {report.records_purged} records expired to tombstones, "
                f"{report.tombstones_purged} tombstones purged"
            )

    def shutdown(self) -> None:
        """Stop executing (the in-flight claim stays durable for recovery), close the store."""
        self.core.stop()
        self._process_work.release()
        self.store.close()


def main(args: list[str] | None = None) -> None:
    # One thread is enough: commands are handled one at a time anyway (claims serialise),
    # execution runs on the agent's own worker thread, and a single-threaded executor's
    # wake-ups cost less than a multi-threaded one's (see ros/node_main.py).
    run_nodes("agent_driver", lambda: [AgentDriver()], executor="single", args=args)


if __name__ == "__main__":
    main()
