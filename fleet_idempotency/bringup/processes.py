"""Start, crash, restart and stop the fleet's processes without ``ros2 launch``.

Every child gets its own session, so a kill -9 hits exactly one node (and whatever it
spawned), and ``stop_all`` leaves nothing behind even when the caller is interrupted.
No ROS imports.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fleet_idempotency.bringup.plan import NodeSpec


@dataclass
class _Child:
    argv: list[str]
    process: subprocess.Popen[bytes]
    restarts: int = 0


def executable(name: str) -> str:
    """A console script of this package: beside the interpreter (venv), else on PATH."""
    local = Path(sys.executable).with_name(name)
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"console script {name!r} not found (is the package installed?)")
    return found


class FleetProcesses:
    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.children: dict[str, _Child] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, argv: list[str]) -> None:
        log = (self.log_dir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            argv,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()  # the child holds its own descriptor
        previous = self.children.get(name)
        self.children[name] = _Child(argv, process, previous.restarts + 1 if previous else 0)

    def start_node(self, spec: NodeSpec, name: str | None = None) -> None:
        self.start(
            name or _process_name(spec), [executable(spec.executable), *spec.ros_arguments()]
        )

    def start_plan(
        self, plan: list[NodeSpec], *, fleet_file: Path, store_dir: Path, host_agents: bool = False
    ) -> None:
        """Start every node of ``plan``; with ``host_agents``, all agents in one process
        named "agents" (each still with its own store)."""
        for spec in plan:
            if not (host_agents and spec.executable == "agent_driver"):
                self.start_node(spec)
        if host_agents:
            self.start(
                "agents",
                [
                    executable("agent_host"),
                    "--fleet",
                    str(fleet_file),
                    "--store-dir",
                    str(store_dir),
                ],
            )

    def crash(self, name: str) -> None:
        """kill -9, as a power cut or a segfault would."""
        child = self.children[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.process.pid, signal.SIGKILL)
        child.process.wait()
        clean_dds_shared_memory()

    def restart(self, name: str) -> None:
        self.start(name, self.children[name].argv)

    def alive(self, name: str) -> bool:
        return self.children[name].process.poll() is None

    def stop_all(self, timeout_s: float = 10.0) -> dict[str, int | None]:
        """SIGTERM everyone, SIGKILL stragglers; return each child's exit code."""
        for child in self.children.values():
            if child.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for child in self.children.values():
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()
        return {name: child.process.returncode for name, child in self.children.items()}

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _process_name(spec: NodeSpec) -> str:
    robot = spec.parameters.get("robot_id")
    return f"agent_{robot}" if robot else spec.executable


def clean_dds_shared_memory() -> None:
    # A SIGKILLed Fast DDS participant leaves its shared-memory segments behind.
    with contextlib.suppress(FileNotFoundError, subprocess.SubprocessError):
        subprocess.run(
            [executable("fastdds"), "shm", "clean"], capture_output=True, check=False, timeout=30
        )
