"""Run ``ros2 launch`` as a terminal user does, and read launch's own account of its nodes.

For the launch tests and ``bench/bench_launch_sigint.py``; no ROS imports. The launch
runs in a process group of its own, as a shell's foreground job does, so ``interrupt``
is a terminal's Ctrl-C: one SIGINT to every process of the group at once (launch then
forwards a second one to each node). How each node ended is taken from launch's lines
(``process has finished cleanly`` / ``process has died [..., exit code N``), which is what
a user sees; anything a node printed that shows a dirty exit is collected as a problem.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

FINISHED = re.compile(r"\[INFO\] \[([\w.-]+)\]: process has finished cleanly \[pid (\d+)\]")
DIED = re.compile(
    r"\[(?:ERROR|INFO)\] \[([\w.-]+)\]: process has died \[pid (\d+), exit code (-?\d+)"
)
STARTED = re.compile(r"\[INFO\] \[([\w.-]+)\]: process started with pid \[(\d+)\]")
# What a clean stop never prints: a traceback, an error Python could only report
# (the signal wake-up fd one among them), a fatal error, an abandoned asyncio task.
PROBLEM = re.compile(
    r"Traceback \(most recent call last\)|Exception ignored|Fatal Python error|CancelledError"
)


# The line each node of a fleet prints once it serves: the world simulator, the
# orchestrator, the HTTP API, and every agent (``AGENT_READY``, once per robot).
FLEET_READY = ("world from", "orchestrating", "http_api: serving")
AGENT_READY = " ready: store "


def fleet_up(text: str, agents: int, *, with_http: bool = True) -> bool:
    """Whether launch's output shows every node of a fleet of ``agents`` robots serving."""
    markers = FLEET_READY if with_http else FLEET_READY[:2]
    return text.count(AGENT_READY) >= agents and all(m in text for m in markers)


@dataclass
class NodeExit:
    name: str  # launch's name for the process, e.g. agent_driver-3
    pid: int
    code: int


@dataclass
class LaunchOutcome:
    returncode: int
    seconds_to_exit: float
    exits: list[NodeExit] = field(default_factory=list)  # after the interrupt, in order
    started_after_stop: list[str] = field(default_factory=list)  # respawned while stopping
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return (
            self.returncode == 0
            and all(e.code == 0 for e in self.exits)
            and not self.started_after_stop
            and not self.problems
        )

    def summary(self) -> str:
        codes = ",".join(str(e.code) if not e.code else f"{e.name}:{e.code}" for e in self.exits)
        return (
            f"launch rc {self.returncode} after {self.seconds_to_exit:.1f} s; node exit codes "
            f"[{codes or 'none'}]; respawned while stopping {len(self.started_after_stop)}; "
            f"problem lines {len(self.problems)}"
        )


def ros2_executable() -> str | None:
    """The ``ros2`` CLI beside this interpreter (a venv with the launch stack), else on PATH."""
    beside = Path(sys.executable).with_name("ros2")
    return str(beside) if beside.exists() else shutil.which("ros2")


def node_exits(text: str) -> list[NodeExit]:
    exits = [(m.start(), NodeExit(m[1], int(m[2]), 0)) for m in FINISHED.finditer(text)]
    exits += [(m.start(), NodeExit(m[1], int(m[2]), int(m[3]))) for m in DIED.finditer(text)]
    return [e for _at, e in sorted(exits, key=lambda pair: pair[0])]


def started_pids(text: str) -> dict[str, int]:
    """The latest pid launch reported for each of its processes."""
    return {m[1]: int(m[2]) for m in STARTED.finditer(text)}


class Ros2Launch:
    """One ``ros2 launch`` in its own process group, its output (stdout and stderr) in
    ``log``. Use as a context manager: leaving it stops whatever is still running."""

    def __init__(
        self,
        arguments: list[str],
        env: Mapping[str, str],
        log: Path,
        *,
        command: list[str] | None = None,
    ) -> None:
        """``ros2 launch <arguments>``, or ``command`` (e.g. a shell that sources a
        workspace, then execs ros2 launch: exec, so the group's leader is launch)."""
        if command is None:
            ros2 = ros2_executable()
            if ros2 is None:
                raise FileNotFoundError("no ros2 CLI (the ROS 2 launch stack is not installed)")
            command = [ros2, "launch", *arguments]
        self.argv = command
        self.env = dict(env)
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self._stopped_at = 0  # length of the output when the interrupt was sent
        self._interrupted_at = time.monotonic()

    def __enter__(self) -> Ros2Launch:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def start(self) -> None:
        with self.log.open("ab") as sink:
            # A shell's background job inherits SIGINT ignored, and launch and its nodes
            # would inherit that in turn: a Ctrl-C test would then test nothing.
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                # Safe with threads here: it only sets the child's own signal disposition.
                preexec_fn=_default_sigint,  # noqa: PLW1509
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_until(self, condition: Callable[[str], bool], timeout_s: float, what: str) -> str:
        """Return the output once ``condition(output)`` holds; raise if launch ends or
        ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.output()
            if condition(text):
                return text
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"ros2 launch ended before {what}:\n{text[-4000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {timeout_s:g} s:\n{text[-4000:]}")
            time.sleep(0.05)

    def interrupt(self, times: int = 1, gap_s: float = 0.005) -> None:
        """A terminal's Ctrl-C (pressed ``times`` times, ``gap_s`` apart): SIGINT to the
        whole process group."""
        assert self.process is not None
        self._stopped_at = len(self.output())
        self._interrupted_at = time.monotonic()
        for press in range(times):
            if press:
                time.sleep(gap_s)
            os.killpg(self.process.pid, signal.SIGINT)

    def wait(self, timeout_s: float) -> LaunchOutcome:
        """Wait for launch to exit after ``interrupt``; what it and its nodes did since
        (``seconds_to_exit`` counts from the interrupt)."""
        assert self.process is not None
        returncode = self.process.wait(timeout=timeout_s)
        seconds = time.monotonic() - self._interrupted_at
        after = self.output()[self._stopped_at :]
        return LaunchOutcome(
            returncode=returncode,
            seconds_to_exit=seconds,
            exits=node_exits(after),
            started_after_stop=[m[1] for m in STARTED.finditer(after)],
            problems=problem_lines(after),
        )

    def close(self) -> None:
        """Stop the group if it still runs: SIGTERM, then SIGKILL, each given 10 s."""
        if self.process is None:
            return
        for stop in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, stop)
            except ProcessLookupError:
                break  # no process of the group is left
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(self.process.pid):
                break


def problem_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if PROBLEM.search(line)]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
