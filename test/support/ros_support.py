"""Helpers for tests that run real ROS processes: spawn, wait for conditions, clean up."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fleet_idempotency.bringup.processes import clean_dds_shared_memory
from fleet_idempotency.testing.agent_under_test import ConformanceFailure, ask, wait_until

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 20.0
# For tests that stop nodes and check how: one rerun, for the stall seen about once in a CI
# run (a thread serving a side node stays in rclpy after the context's shutdown until the
# 5 s join deadline, ros/node_main.SIDE_THREADS_JOIN_S; cause not found), which fails a
# stop's timing, not its exit code. Fast DDS's participant-teardown deadlock, which used to
# end about one node stop in 200-500 at -14, no longer needs it: such a node exits 0
# after 3 s (ros/teardown_backstop.py).
RERUN_ONCE_ON_A_STALLED_STOP = pytest.mark.flaky(reruns=1)


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "condition",
    executor: Any = None,
    poll_s: float = 0.02,
) -> T:
    """Return the first truthy value of ``condition``; fail the test after ``timeout_s``.

    With an executor, callbacks are spun while waiting so that replies can arrive. The
    loop is the conformance kit's (``testing.agent_under_test.wait_until``); a time-out
    is a pytest failure here.
    """
    spin = None if executor is None else (lambda s: executor.spin_once(timeout_sec=s))
    try:
        return wait_until(condition, what, timeout_s=timeout_s, spin=spin, poll_s=poll_s)
    except ConformanceFailure as timed_out:
        pytest.fail(str(timed_out))


def ask_service(
    client: Any, request: Any, *, executor: Any, what: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Any:
    """A service's answer, the request re-sent until one comes (the kit's ``ask``: a
    response can be lost while discovery is still matching); a pytest failure on time-out."""
    try:
        return ask(
            client,
            request,
            what,
            spin=lambda s: executor.spin_once(timeout_sec=s),
            timeout_s=timeout_s,
        )
    except ConformanceFailure as timed_out:
        pytest.fail(str(timed_out))


class ChildProcesses:
    """Real child processes of one test, each logging to its own file."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        # Not the repo root as cwd: `python -m` would import the source tree, which lacks
        # the generated interfaces, instead of the installed package.
        process = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.log_dir
        )
        self.processes[name] = process
        return process

    def spawn_python(
        self, name: str, script_args: list[str], env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        return self.spawn(name, [sys.executable, *script_args], env)

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> int:
        process = self.processes[name]
        with suppress(ProcessLookupError):
            process.send_signal(sig)
        try:
            code = process.wait(timeout=DEFAULT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # Where a node hangs on its way out is what the failure must show.
            print(f"----- {name} did not exit on {sig.name}: its threads -----")
            print(thread_stacks(process.pid))
            process.kill()
            process.wait()
            raise
        if sig == signal.SIGKILL:
            clean_dds_shared_memory()
        return code

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def children(tmp_path: Path) -> Iterator[ChildProcesses]:
    managed = ChildProcesses(tmp_path)
    try:
        yield managed
    finally:
        managed.stop_all()
        for name in managed.processes:
            # Shown by pytest only when the test failed: the children's side of the story.
            print(f"----- {name} -----\n{managed.log(name)[-4000:]}")


def thread_stacks(pid: int) -> str:
    """Every thread's Python and native stack of a live process (py-spy), and gdb's native
    stacks (py-spy shows no thread once the interpreter is finalizing), or why not."""
    spy = Path(sys.executable).with_name("py-spy")
    commands = [[str(spy), "dump", "--native", "--pid", str(pid)]]
    if shutil.which("gdb"):
        commands.append(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"])
    dumps = []
    for command in commands:
        try:
            dumped = subprocess.run(
                command, capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            dumps.append(f"(no stacks from {command[0]}: {error})")
            continue
        dumps.append(dumped.stdout + dumped.stderr)
    return "\n".join(dumps)


def describe_processes(text: str) -> str:
    """Each process mentioning ``text`` with its state, parent and open pipes: what a test
    that waited in vain for them to exit should say."""
    lines = []
    for found in processes_mentioning(text):
        pid = found.split(":", 1)[0]
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            fds = Path(f"/proc/{pid}/fd")
            pipes = sorted(
                f"{fd.name}->{os.readlink(fd)}"
                for fd in fds.iterdir()
                if os.readlink(fd).startswith("pipe:")
            )
        except OSError as error:
            lines.append(f"{found} ({error})")
            continue
        lines.append(f"{found} [state {stat[0]}, parent {stat[1]}, pipes {pipes}]")
    return "\n".join(lines) or "none"


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in command:
            found.append(f"{entry.name}: {command}")
    return found
