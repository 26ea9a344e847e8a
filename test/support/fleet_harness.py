"""Drive real world-simulator and agent-driver processes from a test, over real DDS."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.ros.qos import SERVICE_QOS, STATUS_QOS

from support.paths import FLEET_FILE
from support.ros_support import ChildProcesses, ask_service, wait_for

BIN = Path(sys.prefix) / "bin"
STARTUP_TIMEOUT_S = 45.0


class FleetHarness:
    """A test-side node: publishes commands, collects results and statuses, calls services."""

    def __init__(
        self, context: Any, env: dict[str, str], children: ChildProcesses, store_dir: Path
    ) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from fleet_idempotency.msg import CommandResult

        self.env = env
        self.children = children
        self.store_dir = store_dir
        self.node = rclpy.create_node("fleet_test_client", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.results: list[Any] = []
        self.statuses: dict[str, Any] = {}
        self.node.create_subscription(CommandResult, "/fleet/results", self.results.append, 1000)
        self._publishers: dict[str, Any] = {}
        self._check_clients: dict[str, Any] = {}
        self._world_state_client: Any = None
        self.agent_args: dict[str, list[str]] = {}
        self._submit: Any = None
        self._fleet_check: Any = None

    # --- processes --------------------------------------------------------------------------
    def start_world(self) -> None:
        self.children.spawn(
            "world",
            [str(BIN / "world_simulator"), "--ros-args", "-p", f"fleet_file:={FLEET_FILE}"],
            self.env,
        )
        from fleet_idempotency.srv import GetWorldState

        self._world_state_client = self.node.create_client(
            GetWorldState, "/world/state", qos_profile=SERVICE_QOS
        )
        wait_for(
            self._world_state_client.service_is_ready,
            timeout_s=STARTUP_TIMEOUT_S,
            what="the world simulator",
            executor=self.executor,
        )

    def start_agent(
        self, robot_id: str, robot_type: str, *, wait_ready: bool = True, **parameters: Any
    ) -> None:
        """Start (or restart) an agent process and wait until it serves its status check
        and (``wait_ready``) says its backend is ready. ``time_scale``: the simulated
        backend's (``backend_params.time_scale``)."""

        defaults = {
            "robot_id": robot_id,
            "robot_type": robot_type,
            "store_dir": str(self.store_dir),
            "backend_params.time_scale": parameters.pop("time_scale", 0.0),
            "status_period_s": 0.2,
        }
        settings = {**defaults, **parameters}
        args = [str(BIN / "agent_driver"), "--ros-args", "-r", f"__ns:=/fleet/{robot_id}"]
        for name, value in settings.items():
            rendered = str(value).lower() if isinstance(value, bool) else value
            args += ["-p", f"{name}:={rendered}"]
        self.agent_args[robot_id] = args
        known = self._subscription_gids(f"/fleet/{robot_id}/commands")
        predecessor = self.statuses.get(robot_id)
        self.children.spawn(f"agent_{robot_id}", args, self.env)
        self.track_robot(robot_id)
        self.wait_until_serving(robot_id, known, predecessor.boot_id if predecessor else None)
        if wait_ready:
            wait_for(
                lambda: self.statuses[robot_id].ready,
                timeout_s=STARTUP_TIMEOUT_S,
                what=f"{robot_id} to report its backend ready",
                executor=self.executor,
            )

    def track_robot(self, robot_id: str) -> None:
        """Create this side's endpoints for a robot: commands out, status in, CheckKey."""
        from fleet_idempotency.msg import FleetCommand, RobotStatus
        from fleet_idempotency.srv import CheckKey

        if robot_id in self._publishers:
            return
        self._publishers[robot_id] = self.node.create_publisher(
            FleetCommand, f"/fleet/{robot_id}/commands", 256
        )
        self._check_clients[robot_id] = self.node.create_client(
            CheckKey, f"/fleet/{robot_id}/check_key", qos_profile=SERVICE_QOS
        )
        self.node.create_subscription(
            RobotStatus,
            f"/fleet/{robot_id}/status",
            lambda status, rid=robot_id: self.statuses.__setitem__(rid, status),
            STATUS_QOS,
        )

    def serving(self, robot_id: str) -> bool:
        """A first-start check (no predecessor): subscribed, serving, publishing status."""
        return bool(
            self._publishers[robot_id].get_subscription_count() > 0
            and self._check_clients[robot_id].service_is_ready()
            and robot_id in self.statuses
        )

    def ready(self, robot_id: str) -> bool:
        """Serving, and its backend says it can take commands."""
        return self.serving(robot_id) and bool(self.statuses[robot_id].ready)

    def _subscription_gids(self, topic: str) -> set[bytes]:
        return {
            bytes(info.endpoint_gid) for info in self.node.get_subscriptions_info_by_topic(topic)
        }

    def wait_until_serving(
        self, robot_id: str, known_subscriptions: set[bytes], predecessor_boot: str | None = None
    ) -> None:
        """Wait for *this* process's endpoints: a restarted agent's predecessor lingers in
        the DDS graph until its lease expires, and a command sent to it would be lost."""
        process = self.children.processes[f"agent_{robot_id}"]

        def ready() -> bool:
            assert process.poll() is None, (
                f"agent {robot_id} exited with {process.returncode}:\n"
                f"{self.children.log(f'agent_{robot_id}')[-3000:]}"
            )
            fresh = self._subscription_gids(f"/fleet/{robot_id}/commands") - known_subscriptions
            return bool(fresh)

        wait_for(
            ready,
            timeout_s=STARTUP_TIMEOUT_S,
            what=f"agent {robot_id} to subscribe",
            executor=self.executor,
        )
        self._wait_for_an_answer(self._check_clients[robot_id], process, f"agent {robot_id}")
        # A restarted agent keeps its name: wait for the status of *this* process.
        wait_for(
            lambda: (
                robot_id in self.statuses and self.statuses[robot_id].boot_id != predecessor_boot
            ),
            what=f"status of {robot_id}",
            executor=self.executor,
        )

    # --- commands ---------------------------------------------------------------------------
    def send(
        self,
        robot_id: str,
        key: str,
        command_type: str,
        payload: dict[str, Any] | str,
        *,
        attempt: int = 1,
        target_robot: str | None = None,
    ) -> None:
        from fleet_idempotency.msg import FleetCommand

        payload_json = payload if isinstance(payload, str) else json.dumps(payload)
        self._publishers[robot_id].publish(
            FleetCommand(
                idempotency_key=key,
                client_id="test",
                robot_id=target_robot or robot_id,
                command_type=command_type,
                payload_json=payload_json,
                attempt=attempt,
            )
        )

    def result(
        self,
        key: str,
        matches: Callable[[Any], bool] = lambda _r: True,
        *,
        timeout_s: float = 30.0,
        what: str = "",
    ) -> Any:
        def found() -> Any:
            return next((r for r in self.results if r.idempotency_key == key and matches(r)), None)

        return wait_for(
            found,
            timeout_s=timeout_s,
            executor=self.executor,
            what=what or f"a matching result for {key!r}",
        )

    def answer_to(self, key: str, attempt: int, **kwargs: Any) -> Any:
        """The immediate answer to one delivery: the first result echoing its attempt.

        One publisher's messages arrive in order, and the agent answers a delivery before
        its worker can publish the final result (which echoes the same attempt).
        """
        return self.result(key, lambda r: r.attempt == attempt, **kwargs)

    def final_for(self, robot_id: str, key: str) -> Any:
        return self.result(
            key, lambda r: r.robot_id == robot_id and r.state in (3, 4, 5) and not r.replayed
        )

    def final(self, key: str, **kwargs: Any) -> Any:
        from fleet_idempotency.msg import CommandResult

        final_states = (
            CommandResult.STATE_COMPLETED,
            CommandResult.STATE_FAILED,
            CommandResult.STATE_INTERRUPTED,
        )
        return self.result(key, lambda r: r.state in final_states and not r.replayed, **kwargs)

    # --- services ---------------------------------------------------------------------------
    def check_key(self, robot_id: str, key: str) -> Any:
        from fleet_idempotency.srv import CheckKey

        return ask_service(
            self._check_clients[robot_id],
            CheckKey.Request(idempotency_key=key),
            executor=self.executor,
            what=f"CheckKey {key!r} on {robot_id}",
        )

    def world_state(self) -> dict[str, Any]:
        from fleet_idempotency.srv import GetWorldState

        response = ask_service(
            self._world_state_client,
            GetWorldState.Request(),
            executor=self.executor,
            what="the world state",
        )
        state: dict[str, Any] = json.loads(response.state_json)
        return state

    def side_effects(self, robot_id: str, key: str) -> int:
        return len(self.world_state()["side_effects"].get(robot_id, {}).get(key, []))

    def spin_for(self, seconds: float) -> None:
        """Serve callbacks for ``seconds`` (to see that something does *not* happen)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.02)

    def spin_until(self, condition: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
        return wait_for(condition, timeout_s=timeout_s, executor=self.executor, what=what)

    # --- orchestrator -----------------------------------------------------------------------
    def start_orchestrator(self, **parameters: Any) -> None:
        from fleet_idempotency.srv import CheckKey, SubmitCommand

        settings = {
            "fleet_file": str(FLEET_FILE),
            "store_dir": str(self.store_dir / "orchestrator"),
            "retry_initial_s": 0.3,
            "retry_max_s": 1.0,
            **parameters,
        }
        args = [str(BIN / "orchestrator"), "--ros-args"]
        for name, value in settings.items():
            args += ["-p", f"{name}:={value}"]
        self.children.spawn("orchestrator", args, self.env)
        if self._submit is None:
            self._submit = self.node.create_client(
                SubmitCommand, "/fleet/submit_command", qos_profile=SERVICE_QOS
            )
            self._fleet_check = self.node.create_client(
                CheckKey, "/fleet/check_key", qos_profile=SERVICE_QOS
            )
        process = self.children.processes["orchestrator"]
        self._wait_for_an_answer(self._fleet_check, process, "the orchestrator")
        wait_for(self._submit.service_is_ready, executor=self.executor, what="the submit service")

    def _wait_for_an_answer(self, client: Any, process: Any, what: str) -> None:
        """A killed predecessor still looks "ready" until its DDS lease expires: only an
        answer to a status check proves the new process serves."""
        from fleet_idempotency.srv import CheckKey

        probes: list[tuple[Any, float]] = []

        def answered() -> bool:
            assert process.poll() is None, f"{what} exited with {process.returncode}"
            if any(future.done() for future, _sent in probes):
                return True
            if not probes or time.monotonic() - probes[-1][1] > 1.0:
                request = CheckKey.Request(client_id="harness", idempotency_key="probe")
                probes.append((client.call_async(request), time.monotonic()))
            return False

        wait_for(
            answered, timeout_s=STARTUP_TIMEOUT_S, what=f"{what} to answer", executor=self.executor
        )

    def submit_async(
        self,
        client_id: str,
        key: str,
        robot_id: str,
        command_type: str,
        payload: dict[str, Any] | str,
        wait_timeout_s: float = 0.0,
    ) -> Any:
        from fleet_idempotency.srv import SubmitCommand

        payload_json = payload if isinstance(payload, str) else json.dumps(payload)
        return self._submit.call_async(
            SubmitCommand.Request(
                client_id=client_id,
                idempotency_key=key,
                robot_id=robot_id,
                command_type=command_type,
                payload_json=payload_json,
                # float(): rclpy stores an int in a float64 field as garbage (30 -> 5e-324).
                wait_timeout_sec=float(wait_timeout_s),
            )
        )

    def submit(self, *args: Any, wait_timeout_s: float = 0.0, **kwargs: Any) -> Any:
        """Submit and return the answer (see ``submit_all``)."""
        return self.submit_all([args], wait_timeout_s=wait_timeout_s, **kwargs)[0]

    def submit_all(
        self, requests: list[tuple[Any, ...]], wait_timeout_s: float = 0.0, **kwargs: Any
    ) -> list[Any]:
        """Submit all at once; re-send the same request when no answer comes, as a real
        client does: a request or its reply can be lost while discovery completes or
        while the server restarts, and a re-sent submit is always safe."""
        patience_s = wait_timeout_s + 5.0
        sent: list[list[tuple[Any, float]]] = [[] for _ in requests]

        def answers() -> list[Any] | None:
            results = []
            for request, attempts in zip(requests, sent, strict=True):
                done = next((f.result() for f, _at in attempts if f.done()), None)
                if done is None and (
                    not attempts or time.monotonic() - attempts[-1][1] > patience_s
                ):
                    future = self.submit_async(*request, wait_timeout_s=wait_timeout_s, **kwargs)
                    attempts.append((future, time.monotonic()))
                results.append(done)
            return results if all(r is not None for r in results) else None

        return wait_for(
            answers,
            executor=self.executor,
            timeout_s=patience_s * 3,
            what=f"answers to {len(requests)} submits",
        )

    def fleet_check(self, client_id: str, key: str) -> Any:
        from fleet_idempotency.srv import CheckKey

        return ask_service(
            self._fleet_check,
            CheckKey.Request(client_id=client_id, idempotency_key=key),
            executor=self.executor,
            what=f"fleet CheckKey {client_id}/{key}",
        )

    def wait_final(self, client_id: str, key: str, timeout_s: float = 60.0) -> Any:
        final_states = (3, 4, 5)
        return self.spin_until(
            lambda: (c := self.fleet_check(client_id, key)).state in final_states and c,
            f"{client_id}/{key} to reach a final state",
            timeout_s=timeout_s,
        )


@pytest.fixture
def fleet(
    ros_context: Any, ros_env: dict[str, str], children: ChildProcesses, tmp_path: Path
) -> FleetHarness:
    """A harness in this test's own DDS domain, with the world simulator running."""
    harness = FleetHarness(ros_context, ros_env, children, tmp_path / "stores")
    harness.start_world()
    return harness
