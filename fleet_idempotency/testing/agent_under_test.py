"""A real agent driver process with the backend under test, and a test-side node that
talks to it as the orchestrator would: commands out, results and statuses in, CheckKey.

Used by the conformance checks (``conformance.py``); usable on its own for a backend's
other tests. The agent runs as ``python -m fleet_idempotency.agent.node`` with the
interpreter running the tests, in a DDS domain leased for the test, with its store in a
directory of the test's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fleet_idempotency.bringup.plan import render_parameter
from fleet_idempotency.geometry import Pose

T = TypeVar("T")
# Agents start in a few seconds; a loaded CI machine can take many more.
START_TIMEOUT_S = 60.0
ANSWER_TIMEOUT_S = 30.0
RESEND_S = 1.0
FINAL_STATES = (3, 4, 5)  # COMPLETED, FAILED, INTERRUPTED (CommandResult.STATE_*)


class ConformanceFailure(AssertionError):
    """What the backend under test did not do, said in the contract's words."""


@dataclass(frozen=True)
class CommandSpec:
    command_type: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class BackendUnderTest:
    """What the conformance checks need to know about a backend.

    ``completes``: a command it executes and completes; ``refused``: one its ``prepare``
    refuses (an unknown target, say); ``slow``: one whose ``execute`` takes at least ~2 s,
    so that it can be interrupted. ``side_effects(key)``: how many times the robot acted
    on ``key``, read from the robot's side (a log, a counter, a simulator's oracle): the
    checks' oracle for "at most once". ``env``: extra environment for the agent process
    (e.g. PYTHONPATH for a ``module:Class`` backend that is not installed).
    ``reconciles_after_crash``: as the backend's own attribute; then a command cut short
    by a crash or a shutdown may end as the robot reports it (COMPLETED, FAILED), not only
    INTERRUPTED, but never with a second side effect.
    """

    backend: str
    robot_type: str
    completes: CommandSpec
    refused: CommandSpec
    slow: CommandSpec
    side_effects: Callable[[str], int]
    params: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    robot_id: str = "robot_under_test"
    start: Pose = field(default_factory=Pose)
    reconciles_after_crash: bool = False


def wait_until(
    condition: Callable[[], T | None],
    what: str,
    *,
    timeout_s: float = ANSWER_TIMEOUT_S,
    spin: Callable[[float], None] | None = None,
    poll_s: float = 0.02,
) -> T:
    """The first truthy value of ``condition``; ConformanceFailure after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ConformanceFailure(f"timed out after {timeout_s:.0f} s waiting for {what}")
        if spin is not None:
            spin(poll_s)
        else:
            time.sleep(poll_s)


def ask(
    client: Any,
    request: Any,
    what: str,
    *,
    spin: Callable[[float], None],
    timeout_s: float = ANSWER_TIMEOUT_S,
    resend_s: float = RESEND_S,
) -> Any:
    """A service's answer to ``request``, sent again every ``resend_s`` until one comes.

    A response is lost when the server has not yet matched this client's response reader
    (rmw_fastrtps waits 100 ms for that match, then drops the response): a single request
    may then wait for ever, and a loaded machine sees it. For requests that may be repeated
    (status checks, reads).
    """
    sent: list[tuple[Any, float]] = []

    def answered() -> Any:
        for future, _at in sent:
            if future.done():
                return future.result()
        if client.service_is_ready() and (not sent or time.monotonic() - sent[-1][1] >= resend_s):
            sent.append((client.call_async(request), time.monotonic()))
        return None

    try:
        return wait_until(answered, what, timeout_s=timeout_s, spin=spin)
    finally:
        for future, _at in sent:
            if not future.done():
                client.remove_pending_request(future)


class AgentUnderTest:
    """One agent process driving ``subject``'s backend, and the test side's endpoints."""

    def __init__(
        self, subject: BackendUnderTest, *, env: Mapping[str, str], work_dir: Path, context: Any
    ) -> None:
        import rclpy  # noqa: PLC0415 - ROS only once a check runs
        from rclpy.executors import SingleThreadedExecutor  # noqa: PLC0415

        from fleet_idempotency.msg import CommandResult, FleetCommand, RobotStatus  # noqa: PLC0415
        from fleet_idempotency.ros.qos import (  # noqa: PLC0415
            RELIABLE_TOPIC_QOS,
            SERVICE_QOS,
            STATUS_QOS,
        )
        from fleet_idempotency.srv import CheckKey  # noqa: PLC0415

        self.subject = subject
        self.env = {**env, **subject.env}
        self.work_dir = work_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.results: list[Any] = []
        self.statuses: list[Any] = []
        self._boots = 0
        namespace = f"/fleet/{subject.robot_id}"
        self.node = rclpy.create_node("conformance_client", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self._commands = self.node.create_publisher(
            FleetCommand, f"{namespace}/commands", RELIABLE_TOPIC_QOS
        )
        self.node.create_subscription(
            CommandResult, "/fleet/results", self.results.append, RELIABLE_TOPIC_QOS
        )
        self.node.create_subscription(
            RobotStatus, f"{namespace}/status", self.statuses.append, STATUS_QOS
        )
        self._check = self.node.create_client(
            CheckKey, f"{namespace}/check_key", qos_profile=SERVICE_QOS
        )
        self._command_type = FleetCommand
        self._check_type = CheckKey

    # --- the process ----------------------------------------------------------------------
    def arguments(self, **extra: Any) -> list[str]:
        subject = self.subject
        parameters: dict[str, Any] = {
            "robot_id": subject.robot_id,
            "robot_type": subject.robot_type,
            "backend": subject.backend,
            "store_dir": str(self.work_dir / "store"),
            "start_x": float(subject.start.x),
            "start_y": float(subject.start.y),
            "start_theta": float(subject.start.theta),
            "status_period_s": 0.2,
            # Every command type is reported INTERRUPTED after a crash: the checks pin
            # the never-re-run rule, not a backend's resume policy.
            "default_recovery_policy": "interrupt",
            "recovery_policy_by_type.move_to_waypoint": "interrupt",
            **{f"backend_params.{name}": value for name, value in subject.params.items()},
            **extra,
        }
        arguments = [sys.executable, "-m", "fleet_idempotency.agent.node", "--ros-args"]
        arguments += ["-r", f"__ns:=/fleet/{subject.robot_id}"]
        for name, value in parameters.items():
            # Structured values travel as JSON strings, as the fleet file's do.
            plain = json.dumps(value) if isinstance(value, dict | list) else value
            arguments += ["-p", f"{name}:={render_parameter(plain)}"]
        return arguments

    def start(self, *, wait_ready: bool = True, **extra: Any) -> None:
        """Start the agent (again) and wait for this process's status and CheckKey, and
        (``wait_ready``) for it to report its backend ready."""
        self._boots += 1
        log = (self.work_dir / f"agent-{self._boots}.log").open("ab")
        self.process = subprocess.Popen(
            self.arguments(**extra),
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.work_dir,
        )
        seen = {status.boot_id for status in self.statuses}

        def started() -> Any:
            self.assert_alive()
            return next((s for s in self.statuses if s.boot_id not in seen), None)

        first = self.wait(started, "the agent's first status", timeout_s=START_TIMEOUT_S)
        self.boot_id = first.boot_id
        self.wait(self.check_key_answers, "the agent's CheckKey service")
        if wait_ready:
            self.wait(
                lambda: self.latest_status().ready,
                "the agent to report its backend ready",
                timeout_s=START_TIMEOUT_S,
            )

    def check_key_answers(self) -> bool:
        if not self._check.service_is_ready():
            return False
        future = self._check.call_async(self._check_type.Request(idempotency_key="probe"))
        try:
            self.wait(future.done, "a CheckKey answer", timeout_s=2.0)
        except ConformanceFailure:
            self._check.remove_pending_request(future)
            return False
        return True

    def log(self) -> str:
        return "\n".join(
            path.read_text(errors="replace") for path in sorted(self.work_dir.glob("agent-*.log"))
        )

    def assert_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise ConformanceFailure(
                f"the agent exited with {self.process.returncode}:\n{self.log()[-3000:]}"
            )

    def signal(self, sig: signal.Signals, timeout_s: float = 20.0) -> int:
        """Send ``sig`` and wait for the process to end; its exit code."""
        assert self.process is not None
        with suppress(ProcessLookupError):
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise ConformanceFailure(
                f"the agent did not exit within {timeout_s:.0f} s of {sig.name}:\n"
                f"{self.log()[-3000:]}"
            ) from None

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with suppress(ConformanceFailure):
                self.signal(signal.SIGTERM)
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()

    # --- talking to it --------------------------------------------------------------------
    def wait(
        self, condition: Callable[[], T | None], what: str, timeout_s: float = ANSWER_TIMEOUT_S
    ) -> T:
        return wait_until(
            condition,
            what,
            timeout_s=timeout_s,
            spin=lambda s: self.executor.spin_once(timeout_sec=s),
        )

    def send(self, key: str, command: CommandSpec, *, attempt: int = 1) -> None:
        self._commands.publish(
            self._command_type(
                idempotency_key=key,
                client_id="conformance",
                robot_id=self.subject.robot_id,
                command_type=command.command_type,
                payload_json=json.dumps(command.payload),
                attempt=attempt,
            )
        )

    def answers(self, key: str) -> list[Any]:
        return [r for r in self.results if r.idempotency_key == key]

    def answer(self, key: str, matches: Callable[[Any], bool], what: str) -> Any:
        return self.wait(lambda: next((r for r in self.answers(key) if matches(r)), None), what)

    def _published_final(self, key: str) -> Any | None:
        """The key's final result as executed (not a replay), if one was heard."""
        return next(
            (r for r in self.answers(key) if r.state in FINAL_STATES and not r.replayed), None
        )

    def final(self, key: str, timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
        return self.wait(
            lambda: self._published_final(key),
            f"the final result of {key!r}",
            timeout_s=timeout_s,
        )

    def final_after_restart(self, key: str, timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
        """The final outcome of a key the restarted agent recovered: its result on the
        topic, or what CheckKey says. A new process may publish the result before this
        subscriber has matched its publisher, and then only CheckKey (as an orchestrator
        reconciles) or a re-send's replay can tell it."""
        pending: list[Any] = []
        asked_at = [0.0]

        def settled() -> Any:
            published = self._published_final(key)
            if published is not None:
                return published
            for future in [f for f in pending if f.done()]:
                pending.remove(future)
                answer = future.result()
                if answer is not None and answer.state in FINAL_STATES:
                    return answer
            # Asked again even while an earlier request is pending: its answer may be lost.
            if time.monotonic() - asked_at[0] > 0.5:
                asked_at[0] = time.monotonic()
                pending.append(
                    self._check.call_async(self._check_type.Request(idempotency_key=key))
                )
            return None

        try:
            return self.wait(settled, f"the final outcome of {key!r}", timeout_s=timeout_s)
        finally:
            for future in pending:
                self._check.remove_pending_request(future)

    def check_key(self, key: str, timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
        return ask(
            self._check,
            self._check_type.Request(idempotency_key=key),
            f"CheckKey {key!r}",
            spin=lambda s: self.executor.spin_once(timeout_sec=s),
            timeout_s=timeout_s,
        )

    def latest_status(self) -> Any:
        mine = [s for s in self.statuses if s.boot_id == self.boot_id]
        return mine[-1] if mine else None

    def spin_for(self, seconds: float) -> None:
        """Serve callbacks for ``seconds`` (to see that something does *not* happen)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.02)
