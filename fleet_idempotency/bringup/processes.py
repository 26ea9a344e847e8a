"""Start, supervise, crash and stop the fleet's processes without ``ros2 launch``.

Every child gets its own session, so a kill -9 hits exactly one node (and whatever it
spawned), and ``stop_all`` leaves nothing behind even when the caller is interrupted.
Each child also holds the read end of a pipe only this process writes to
(``ros/parent_watch.py``): if this process dies, even by SIGKILL, every child sees EOF and
shuts down, so no node of the fleet outlives ``fleet-idem``.

Supervision is ``ros2 launch``'s ``respawn``: a child that exits while the fleet is up is
started again (unless it exited with the nodes' start-up error code: it would only fail
the same way again, and its log says why) after a delay that doubles while it keeps
dying young (a crash loop must not become a fork bomb) and resets once it has stayed up.
One thread per child blocks in ``wait()``: a death is noticed when it happens. It first
looks a few times at which UDP ports the child holds, and when the child dies by a signal
it keeps those ports from the replacement for a while (``port_hold.py``: otherwise the
replacement takes the dead participant's id while peers still hold it, and is matched
seconds late). No ROS imports.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleet_idempotency.bringup.plan import NodeSpec
from fleet_idempotency.bringup.port_hold import DEAD_PARTICIPANT_LEASE_S, PortHold, udp_ports
from fleet_idempotency.protocol import EXIT_STARTUP_ERROR
from fleet_idempotency.ros.parent_watch import PARENT_FD_VARIABLE

RESPAWN_DELAY_S = 1.0
RESPAWN_DELAY_MAX_S = 30.0
# A child that stayed up this long got through its start-up (~1-5 s: imports, discovery,
# store recovery) and was not crash-looping: its next restart is prompt again, as in
# supervisord's startsecs. At 30 s, the chaos run's kill -9s of a host that had served
# for 20-30 s each doubled the delay up to 30 s: 61 s of its 6 restarts went to waiting.
STABLE_AFTER_S = 10.0
# When the supervisor looks at a child's UDP ports, in seconds after each previous look:
# a participant binds them as it starts (under a second here; later after a long store
# recovery), and they do not change afterwards.
PORT_LOOKS_S = (0.5, 1.0, 2.0, 4.0, 8.0)


@dataclass(frozen=True)
class Restart:
    name: str
    exit_code: int | None
    count: int  # restarts of this child so far, this one included
    delay_s: float


@dataclass
class _Child:
    argv: list[str]
    process: subprocess.Popen[bytes]
    started_at: float
    restarts: int = 0
    delay_s: float = RESPAWN_DELAY_S
    udp_ports: set[int] = field(default_factory=set)
    ports_held: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)


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
    def __init__(
        self,
        log_dir: Path,
        env: dict[str, str],
        *,
        respawn: bool = True,
        respawn_delay_s: float = RESPAWN_DELAY_S,
        on_restart: Callable[[Restart], None] = lambda _restart: None,
        on_give_up: Callable[[str], None] = lambda _name: None,
        port_hold_s: float = DEAD_PARTICIPANT_LEASE_S,
    ) -> None:
        """``port_hold_s``: how long a child killed by a signal keeps its UDP ports from
        whatever starts next (0: not at all). ``on_give_up(name)``: a child exited with the
        start-up error code and is not restarted."""
        self.log_dir = log_dir
        self.env = env
        self.respawn = respawn
        self.respawn_delay_s = respawn_delay_s
        self._on_restart = on_restart
        self._on_give_up = on_give_up
        self.given_up: list[str] = []
        self.port_hold_s = port_hold_s
        self._port_holds: list[PortHold] = []
        self.children: dict[str, _Child] = {}
        self.restarts: list[Restart] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._restarted = threading.Condition(self._lock)
        # Only this process holds the write end; every child inherits the read end.
        self._watch_read, self._watch_write = os.pipe()
        log_dir.mkdir(parents=True, exist_ok=True)

    # --- starting -------------------------------------------------------------------------
    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start ``argv`` as child ``name``, with ``env`` added to the fleet's environment."""
        extra_env = dict(env or {})
        with self._lock:
            previous = self.children.get(name)
            child = _Child(
                argv, self._spawn(name, argv, extra_env), time.monotonic(), extra_env=extra_env
            )
            child.delay_s = self.respawn_delay_s
            if previous is not None:
                child.restarts, child.delay_s = previous.restarts, previous.delay_s
            self.children[name] = child
        if self.respawn:
            threading.Thread(
                target=self._supervise, args=(name, child), name=f"supervise-{name}", daemon=True
            ).start()

    def _spawn(
        self, name: str, argv: list[str], extra_env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        try:
            return subprocess.Popen(
                argv,
                env={**self.env, **extra_env, PARENT_FD_VARIABLE: str(self._watch_read)},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(self._watch_read,),
            )
        finally:
            log.close()  # the child holds its own descriptor

    def start_node(self, spec: NodeSpec, name: str | None = None) -> None:
        self.start(
            name or _process_name(spec),
            [executable(spec.executable), *spec.ros_arguments()],
            spec.env,
        )

    def start_plan(
        self,
        plan: list[NodeSpec],
        *,
        fleet_file: Path,
        store_dir: Path,
        host_agents: bool = False,
        keyring_dir: Path | None = None,
    ) -> None:
        """Start every node of ``plan``; with ``host_agents``, all agents in one process
        named "agents" (each still with its own store and keyring)."""
        for spec in plan:
            if not (host_agents and spec.executable == "agent_driver"):
                self.start_node(spec)
        if host_agents:
            argv = [executable("agent_host"), "--fleet", str(fleet_file)]
            argv += ["--store-dir", str(store_dir)]
            if keyring_dir is not None:
                argv += ["--keyring-dir", str(keyring_dir)]
            self.start("agents", argv)

    # --- supervision ----------------------------------------------------------------------
    def _supervise(self, name: str, child: _Child) -> None:
        exit_code = self._learn_ports_then_wait(child)
        if self._stopping.is_set():
            return
        if exit_code == EXIT_STARTUP_ERROR:
            with self._lock:
                self.given_up.append(name)
            self._on_give_up(name)
            return
        if exit_code < 0:
            self._hold_ports(child)
        with self._lock:
            if self.children.get(name) is not child:
                return  # replaced by a new start() of the same name meanwhile
            lived_s = time.monotonic() - child.started_at
            delay = self.respawn_delay_s if lived_s >= STABLE_AFTER_S else child.delay_s
        clean_dds_shared_memory()
        # The delay is what respawn_delay is in ros2 launch: a dead node's DDS participant
        # lingers in the graph for a moment, and a crash loop must not spin.
        if self._stopping.wait(delay):
            return
        with self._lock:
            if self._stopping.is_set() or self.children.get(name) is not child:
                return
            restarted = _Child(
                child.argv,
                self._spawn(name, child.argv, child.extra_env),
                time.monotonic(),
                extra_env=child.extra_env,
            )
            restarted.restarts = child.restarts + 1
            restarted.delay_s = min(RESPAWN_DELAY_MAX_S, delay * 2)
            self.children[name] = restarted
            restart = Restart(name, exit_code, restarted.restarts, delay)
            self.restarts.append(restart)
            self._restarted.notify_all()
        threading.Thread(
            target=self._supervise, args=(name, restarted), name=f"supervise-{name}", daemon=True
        ).start()
        self._on_restart(restart)

    def _learn_ports_then_wait(self, child: _Child) -> int:
        for look_after_s in PORT_LOOKS_S:
            try:
                return child.process.wait(timeout=look_after_s)
            except subprocess.TimeoutExpired:
                child.udp_ports |= udp_ports(child.process.pid)
        return child.process.wait()

    def _hold_ports(self, child: _Child) -> None:
        """Keep a child that died by a signal from handing its ports to its replacement."""
        with self._lock:
            if child.ports_held or not child.udp_ports or self.port_hold_s <= 0:
                return
            child.ports_held = True
            self._port_holds = [hold for hold in self._port_holds if hold.sockets]
            self._port_holds.append(PortHold(child.udp_ports, self.port_hold_s))

    def wait_restarted(self, name: str, count: int, timeout_s: float) -> bool:
        """Wait until ``name`` has been restarted ``count`` times in all."""
        deadline = time.monotonic() + timeout_s
        with self._restarted:
            while self.children[name].restarts < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._restarted.wait(remaining)
            return True

    # --- faults and inspection ------------------------------------------------------------
    def crash(self, name: str) -> None:
        """kill -9, as a power cut or a segfault would; the supervisor restarts it."""
        with self._lock:
            child = self.children[name]
        child.udp_ports |= udp_ports(child.process.pid)  # if the supervisor has not looked yet
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.process.pid, signal.SIGKILL)
        child.process.wait()
        self._hold_ports(child)
        if not self.respawn:
            clean_dds_shared_memory()

    def alive(self, name: str) -> bool:
        return self.children[name].process.poll() is None

    def restart_count(self, name: str) -> int:
        return self.children[name].restarts

    # --- stopping -------------------------------------------------------------------------
    def stop_all(self, timeout_s: float = 10.0) -> dict[str, int | None]:
        """SIGTERM everyone, SIGKILL stragglers; return each child's exit code."""
        self._stopping.set()
        with self._lock:
            children = dict(self.children)
        for child in children.values():
            if child.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for child in children.values():
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()
        for fd in (self._watch_read, self._watch_write):
            with contextlib.suppress(OSError):
                os.close(fd)
        with self._lock:
            holds, self._port_holds = self._port_holds, []
        for hold in holds:
            hold.release()
        return {name: child.process.returncode for name, child in children.items()}

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _process_name(spec: NodeSpec) -> str:
    robot = spec.parameters.get("robot_id")
    return f"agent_{robot}" if robot else spec.name


def clean_dds_shared_memory() -> None:
    # A SIGKILLed Fast DDS participant leaves its shared-memory segments behind.
    with contextlib.suppress(FileNotFoundError, subprocess.SubprocessError):
        subprocess.run(
            [executable("fastdds"), "shm", "clean"], capture_output=True, check=False, timeout=30
        )
