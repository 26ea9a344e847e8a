"""The backend conformance checks: run them against your backend to show it keeps the
contract the agent's exactly-once guarantee rests on.

Each check drives a real agent process (``python -m fleet_idempotency.agent.node``) with
your backend, a real LMDB store and real signals, over real DDS in a domain of its own.
To run them, import them into a test module of yours and give them your backend::

    import pytest
    from fleet_idempotency.testing import BackendUnderTest, CommandSpec
    from fleet_idempotency.testing.conformance import *  # noqa: F403 - the checks

    @pytest.fixture
    def backend_under_test(tmp_path) -> BackendUnderTest:
        return BackendUnderTest(backend="my_robot", robot_type="charger", ...)

``backend_under_test`` may ask for ``conformance_env`` (the environment of the test's
DDS domain) to start what the backend talks to first. docs/backends.md explains each
check. What they pin:

- a refusal in ``prepare`` has no side effect and releases the key;
- each key executes once under duplicated, reordered and re-sent deliveries, and every
  re-delivery is answered with the same result;
- ``shutdown`` aborts a running command promptly, and the agent exits cleanly;
- a crash (kill -9) mid-``execute`` becomes INTERRUPTED after restart, never re-run (a
  backend that ``reconciles_after_crash`` ends it as its robot reports, never re-run);
- ``pose`` is readable while a command runs;
- a command in progress does not stall CheckKey or the status.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_idempotency.bringup.processes import clean_dds_shared_memory
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id
from fleet_idempotency.testing.agent_under_test import AgentUnderTest, BackendUnderTest

__all__ = [
    "agent_under_test",
    "conformance_context",
    "conformance_domain",
    "conformance_env",
    "test_conformance_crash_mid_execute_is_interrupted_never_rerun",
    "test_conformance_each_key_executes_once",
    "test_conformance_pose_is_readable_while_a_command_runs",
    "test_conformance_prepare_refusal_has_no_side_effect_and_releases_the_key",
    "test_conformance_running_command_does_not_stall_check_key_or_status",
    "test_conformance_shutdown_aborts_a_running_command_promptly",
]

ACCEPTED, REJECTED, IN_PROGRESS, COMPLETED, FAILED, INTERRUPTED = 1, 6, 2, 3, 4, 5
# "Promptly": the agent gives a running command this long to abort on shutdown.
SHUTDOWN_DEADLINE_S = 5.0
# How long CheckKey may take while the robot is busy (it is answered from the store).
CHECK_KEY_DEADLINE_S = 2.0


@pytest.fixture
def conformance_domain() -> Iterator[int]:
    with lease_domain_id() as domain_id:
        yield domain_id


@pytest.fixture
def conformance_env(conformance_domain: int) -> dict[str, str]:
    """The environment of the test's DDS domain, for whatever the backend talks to."""
    return isolated_environment(conformance_domain)


@pytest.fixture
def conformance_context(conformance_domain: int) -> Iterator[Any]:
    import rclpy  # noqa: PLC0415

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=conformance_domain)
    try:
        yield context
    finally:
        context.try_shutdown()


@pytest.fixture
def agent_under_test(
    backend_under_test: BackendUnderTest,
    conformance_env: dict[str, str],
    conformance_context: Any,
    tmp_path: Path,
) -> Iterator[AgentUnderTest]:
    work_dir = tmp_path / "agent_under_test"
    work_dir.mkdir()
    agent = AgentUnderTest(
        backend_under_test, env=conformance_env, work_dir=work_dir, context=conformance_context
    )
    try:
        agent.start()
        yield agent
    finally:
        agent.close()
        print(f"----- agent under test -----\n{agent.log()[-4000:]}")


def _final_after_restart(
    agent: AgentUnderTest, subject: BackendUnderTest, key: str, acted: int
) -> Any:
    """The key's final result after a restart: INTERRUPTED, or for a backend that
    reconciles, whatever the robot reports; never executed again either way."""
    final = agent.final_after_restart(key)
    agent.spin_for(0.5)
    if subject.reconciles_after_crash:
        assert final.state in (COMPLETED, FAILED, INTERRUPTED), final
        # The robot went on with the one execution it had begun: at most one effect.
        assert subject.side_effects(key) <= 1
    else:
        assert final.state == INTERRUPTED, final
        assert subject.side_effects(key) == acted
    return final


def _running(agent: AgentUnderTest, key: str) -> None:
    """Wait until the agent says it is executing ``key``."""
    agent.wait(
        lambda: (status := agent.latest_status()) is not None and status.current_key == key,
        f"the agent to start executing {key!r}",
    )


def test_conformance_prepare_refusal_has_no_side_effect_and_releases_the_key(
    agent_under_test: AgentUnderTest, backend_under_test: BackendUnderTest
) -> None:
    agent, subject = agent_under_test, backend_under_test
    key = "conformance-refused"
    agent.send(key, subject.refused)
    refusal = agent.answer(key, lambda r: r.state == REJECTED, "the refusal from prepare")
    assert 400 <= refusal.status_code < 500, refusal
    assert refusal.message, "a refusal says why"
    assert subject.side_effects(key) == 0, "prepare refused, yet the robot acted"
    assert not agent.check_key(key).found, "a refused key must be released, not stored"
    # Released, not cached: a retry goes through prepare again (and is refused again).
    agent.send(key, subject.refused, attempt=2)
    # Its 202 may come first: the agent acknowledges a claim whose answer takes a while.
    retry = agent.answer(
        key, lambda r: r.attempt == 2 and r.state != ACCEPTED, "the answer to the retry"
    )
    assert retry.state == REJECTED and not retry.replayed, retry
    assert subject.side_effects(key) == 0


def test_conformance_each_key_executes_once(
    agent_under_test: AgentUnderTest, backend_under_test: BackendUnderTest
) -> None:
    agent, subject = agent_under_test, backend_under_test
    first, second = "conformance-once-1", "conformance-once-2"
    # Duplicated, reordered (a re-send overtaking the first send) and re-sent deliveries.
    agent.send(first, subject.completes)
    agent.send(first, subject.completes)
    agent.send(second, subject.completes, attempt=2)
    agent.send(first, subject.completes, attempt=2)
    agent.send(second, subject.completes, attempt=1)
    finals = {key: agent.final(key) for key in (first, second)}
    for key, final in finals.items():
        assert final.state == COMPLETED and final.status_code == 200, final
        assert subject.side_effects(key) == 1, f"{key!r} acted on {subject.side_effects(key)}x"
    # After the end: a re-send is answered from the store, the same body, flagged.
    agent.send(first, subject.completes, attempt=3)
    replay = agent.answer(first, lambda r: r.attempt == 3, "the answer to a late re-send")
    assert replay.replayed and replay.state == COMPLETED, replay
    assert replay.result_json == finals[first].result_json
    agent.spin_for(0.5)
    assert subject.side_effects(first) == 1
    assert len([r for r in agent.answers(first) if r.state == COMPLETED and not r.replayed]) == 1


def test_conformance_shutdown_aborts_a_running_command_promptly(
    agent_under_test: AgentUnderTest, backend_under_test: BackendUnderTest
) -> None:
    agent, subject = agent_under_test, backend_under_test
    key = "conformance-shutdown"
    agent.send(key, subject.slow)
    _running(agent, key)
    started = time.monotonic()
    code = agent.signal(signal.SIGTERM, timeout_s=SHUTDOWN_DEADLINE_S + 15)
    took = time.monotonic() - started
    assert code == 0, f"exit code {code} on SIGTERM:\n{agent.log()[-2000:]}"
    assert took <= SHUTDOWN_DEADLINE_S, f"shutdown took {took:.1f} s with a command running"
    assert "Traceback" not in agent.log()
    acted = subject.side_effects(key)
    # Aborted mid-command: after a restart it is reported, never run again.
    agent.start()
    _final_after_restart(agent, subject, key, acted)


def test_conformance_crash_mid_execute_is_interrupted_never_rerun(
    agent_under_test: AgentUnderTest, backend_under_test: BackendUnderTest
) -> None:
    agent, subject = agent_under_test, backend_under_test
    key = "conformance-crash"
    agent.send(key, subject.slow)
    _running(agent, key)
    assert agent.signal(signal.SIGKILL) == -signal.SIGKILL
    clean_dds_shared_memory()
    acted = subject.side_effects(key)
    assert acted <= 1
    agent.start()
    final = _final_after_restart(agent, subject, key, acted)
    assert agent.check_key(key).state == final.state
    acted = subject.side_effects(key)
    # A retry of the same key is answered, not executed: re-running half a pick is how
    # pallets get dropped.
    # An attempt no recovery uses: the store counts the restart as an attempt (2), and a
    # reconciling backend's final answer carries it.
    agent.send(key, subject.slow, attempt=10)
    replay = agent.answer(key, lambda r: r.attempt == 10, "the answer to the retry")
    assert replay.replayed and replay.state == final.state, replay
    agent.spin_for(1.0)
    assert subject.side_effects(key) == acted
    # And the robot works on: a new key runs.
    agent.send("conformance-after-crash", subject.completes)
    assert agent.final("conformance-after-crash").state == COMPLETED


def test_conformance_pose_is_readable_while_a_command_runs(
    agent_under_test: AgentUnderTest, backend_under_test: BackendUnderTest
) -> None:
    agent, subject = agent_under_test, backend_under_test
    key = "conformance-pose"
    agent.send(key, subject.slow)
    _running(agent, key)

    def busy_statuses() -> list[Any] | None:
        found = [s for s in agent.statuses if s.boot_id == agent.boot_id and s.current_key == key]
        return found if len(found) >= 3 else None

    # Each status carries the backend's pose, read while execute runs on another thread.
    statuses = agent.wait(busy_statuses, "three statuses while the command runs")
    for status in statuses:
        assert all(math.isfinite(v) for v in (status.x, status.y, status.theta)), status
    agent.final(key)


def test_conformance_running_command_does_not_stall_check_key_or_status(
    agent_under_test: AgentUnderTest, backend_under_test: BackendUnderTest
) -> None:
    agent, subject = agent_under_test, backend_under_test
    key = "conformance-liveness"
    agent.send(key, subject.slow)
    _running(agent, key)
    asked = time.monotonic()
    status = agent.check_key(key, timeout_s=CHECK_KEY_DEADLINE_S)
    assert time.monotonic() - asked <= CHECK_KEY_DEADLINE_S
    assert status.found and status.state == IN_PROGRESS, status
    seen = len(agent.statuses)
    agent.wait(lambda: len(agent.statuses) > seen, "a status while busy", timeout_s=2.0)
    final = agent.final(key)
    assert final.state == COMPLETED, final
