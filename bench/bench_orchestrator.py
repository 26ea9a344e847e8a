"""Orchestrator figures, measured side by side in one run (prints name=value lines).

- submit -> final-result latency through the real pipeline (orchestrator claim + event
  log + dispatch, agent claim + world action + finish, orchestrator finish + event) for a
  zero-duration command (``dock`` at the dock the robot already sits at, time scale 0),
  using ``SubmitCommand`` with ``wait_timeout_sec > 0``, against a bare rclpy service
  round trip of the same ``SubmitCommand`` type through an echo process, plus one raw
  ``fdatasync`` of a small file (the goal is 2x the bare round trip + 3 fdatasyncs: the
  orchestrator's claim, the robot's claim and the orchestrator's finish);
- sustained commands/s through one orchestrator to ``--robots`` simulated robots (hosted
  by ``agent_host`` processes), many submits outstanding, with zero loss verified at the
  end: every key is COMPLETED at the orchestrator and the world saw exactly one side
  effect per command;
- the bare rclpy ceiling: the same commands through bench/bare_pipeline.py (the same
  messages, hops and process shapes, no logic), and the pipeline's fraction of it;
- a lone command's latency hop by hop (see ``latency_breakdown``);
- with ``--scaling``, further phases of growing size: commands/s and CPU per command
  should stay flat while the stores fill; then the bare ceiling again, whose change over
  the run is the machine's drift, not the fleet's growth;
- with several ``--robots`` sizes, one whole fleet per size in a row, then one table: per
  size commands/s beside the bare ceiling, submit->final p50, CPU per command of the
  orchestrator and of each agent host, start-up to every robot ready, the time a
  restarted orchestrator takes to see every robot again (from its own event log: each
  robot's ``robot_online``), idle CPU, memory per robot, and the DDS endpoints per robot
  of each kind of process (from the ROS graph);
- where the time goes: CPU seconds per command of each process during the throughput
  phase and, with ``--profile [names]``, the hottest functions of the orchestrator or of
  the named processes (py-spy) in the throughput phase and in each scaling phase, so that
  a small phase after a big one can be set against the same small phase before it.

    .venv/bin/python bench/bench_orchestrator.py [--latency-commands 200]
        [--commands 3000] [--robots 50[,200,500,1000]] [--window 64] [--hosts 2]
        [--profile [orchestrator,agents_1]] [--scaling 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bare_pipeline  # beside this file
import rclpy
import yaml
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import QoSProfile, ReliabilityPolicy

from fleet_idempotency.bringup.postgres import LocalPostgres
from fleet_idempotency.bringup.report import percentile
from fleet_idempotency.events import EventLogConfig, LmdbEventLog
from fleet_idempotency.events.model import EventType
from fleet_idempotency.msg import FleetEvent, FleetEventBatch
from fleet_idempotency.orchestrator.core import robot_key
from fleet_idempotency.orchestrator.journal import needless_sends
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id
from fleet_idempotency.srv import CheckKey, GetWorldState, SubmitCommand
from fleet_idempotency.store import IdempotencyStore, StoreConfig

BIN = Path(sys.prefix) / "bin"
# Many calls outstanding on one client: the default depth (10) would drop requests.
DEEP = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
CLIENT = "bench"
COMPLETED = 3
FINAL_STATES = (3, 4, 5)
# A request (or its reply) can be lost while discovery settles: re-send the same request
# (same key: always safe) when no answer came within this long.
RESEND_AFTER_S = 5.0
ECHO = """
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.qos import QoSProfile
from fleet_idempotency.srv import SubmitCommand
rclpy.init()
node = rclpy.create_node("echo_submit")
def echo(request, response):
    response.state = 3
    response.status_code = 200
    response.result_json = request.payload_json
    return response
node.create_service(SubmitCommand, "/bench/echo_submit", echo, qos_profile=QoSProfile(depth=1000))
try:
    rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
"""


def write_fleet(path: Path, robots: int, capacity: int) -> list[str]:
    """A fleet of AMRs, each parked on its own dock: docking there is a zero-duration
    command that still makes one counted world action (the at-most-once oracle)."""
    docks = {f"D{i + 1}": {"x": 0.0, "y": 2.0 * i} for i in range(robots)}
    fleet = {
        "world": {"waypoints": {"W1": {"x": 5.0, "y": 5.0}}, "docks": docks, "slots": {}},
        "robots": [
            {
                "id": f"amr_{i + 1}",
                "type": "amr",
                "start": {"x": 0.0, "y": 2.0 * i},
                "capacity": capacity,
            }
            for i in range(robots)
        ],
        "simulation": {"time_scale": 0.0},
    }
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return [robot["id"] for robot in fleet["robots"]]


def dock_of(robot_id: str) -> str:
    return f"D{robot_id.rsplit('_', 1)[1]}"


def fdatasync_seconds(directory: Path, samples: int = 50) -> list[float]:
    """One small write + fdatasync, on the file system that holds the stores."""
    path = directory / "fsync_probe"
    durations = []
    with path.open("wb") as handle:
        for index in range(samples):
            handle.seek(0)
            handle.write(f"{index:08d}".encode() * 16)
            handle.flush()
            started = time.perf_counter()
            os.fdatasync(handle.fileno())
            durations.append(time.perf_counter() - started)
    return durations


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its threads (children excluded)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class EventTally:
    """What the fleet's event stream said, counted as it arrives."""

    retried: int = 0
    why: Counter[str] = field(default_factory=Counter)  # retried events by their "why"
    answered_late: int = 0  # sends after the one a result answered
    batches: int = 0
    events: int = 0

    def copy(self) -> EventTally:
        return dataclasses.replace(self, why=Counter(self.why))


class Bench:
    def __init__(self, context: Any) -> None:
        self.node = rclpy.create_node("bench_orchestrator_client", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.submit = self.node.create_client(
            SubmitCommand, "/fleet/submit_command", qos_profile=DEEP
        )
        self.echo = self.node.create_client(SubmitCommand, "/bench/echo_submit", qos_profile=DEEP)
        self.check = self.node.create_client(CheckKey, "/fleet/check_key", qos_profile=DEEP)
        self.world = self.node.create_client(GetWorldState, "/world/state", qos_profile=DEEP)
        # Progress signal only (a keep-last topic may drop under load); the verdict comes
        # from CheckKey and the world.
        self.finished: dict[str, float] = {}
        self.tally = EventTally()
        self.offline = 0
        self.dispatched_at: dict[str, float] = {}  # latency keys: the event's wall-clock stamp
        self.finished_by_check = 0
        self.node.create_subscription(
            FleetEventBatch, "/fleet/event_batches", self._on_event_batch, 10_000
        )
        self.bare_submit = self.node.create_client(
            SubmitCommand, bare_pipeline.SUBMIT_SERVICE, qos_profile=DEEP
        )
        self.bare_finished: dict[str, float] = {}
        self.bare_side = self  # the client of the bare pipeline's domain (bench_fleet)
        self.node.create_subscription(
            FleetEventBatch, bare_pipeline.EVENTS_TOPIC, self._on_bare_events, bare_pipeline.QOS
        )

    def _on_event_batch(self, batch: FleetEventBatch) -> None:
        self.tally.batches += 1
        self.tally.events += len(batch.events)
        for event in batch.events:
            self._on_event(event)

    def _on_event(self, event: FleetEvent) -> None:
        if event.event_type == "result" and event.client_id == CLIENT:
            if event.idempotency_key not in self.finished:
                # Sends after the one answered found nothing lost: they were needless.
                self.tally.answered_late += needless_sends(json.loads(event.detail_json))
            self.finished.setdefault(event.idempotency_key, time.perf_counter())
        elif event.event_type == "retried":
            self.tally.retried += 1  # a re-send: the robot's answer was late or lost
            self.tally.why[json.loads(event.detail_json).get("why", "?")] += 1
        elif event.event_type == "robot_offline":
            self.offline += 1  # not heard for offline_after_s: re-sent in full when back
        elif event.event_type == "dispatched" and event.idempotency_key.startswith("lat-"):
            stamp = event.stamp.sec + event.stamp.nanosec * 1e-9
            self.dispatched_at[event.idempotency_key] = stamp

    def print_events(self, prefix: str, before: EventTally, commands: int) -> None:
        """Since ``before``: re-sends, by reason (the retried events' ``why``), and how many
        found their command already answered (no fault is injected here, so every re-send
        is needless; the reasons say which rule made them); event batches per command."""
        now = self.tally
        print(f"{prefix}_re_sends={now.retried - before.retried}")
        by_reason = now.why - before.why
        reasons = ",".join(f"{reason}:{count}" for reason, count in sorted(by_reason.items()))
        print(f"{prefix}_re_sends_by_reason={reasons}")
        print(f"{prefix}_re_sends_answered_late={now.answered_late - before.answered_late}")
        batches = now.batches - before.batches
        print(f"{prefix}_event_batches_per_command={batches / max(commands, 1):.2f}")
        print(f"{prefix}_events_per_batch={(now.events - before.events) / max(batches, 1):.2f}")

    def _on_bare_events(self, batch: FleetEventBatch) -> None:
        for event in batch.events:
            if event.event_type == "result":
                self.bare_finished.setdefault(event.idempotency_key, time.perf_counter())

    def spin_until(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}")
            self.executor.spin_once(timeout_sec=0.005)

    def call(self, client: Any, request: Any, timeout_s: float, what: str) -> Any:
        """One call, re-sent when unanswered (the first calls after discovery may be lost)."""
        futures: list[tuple[Any, float]] = []

        def answered() -> bool:
            if any(future.done() for future, _sent in futures):
                return True
            if not futures or time.monotonic() - futures[-1][1] > RESEND_AFTER_S:
                futures.append((client.call_async(request), time.monotonic()))
            return False

        self.spin_until(answered, timeout_s, what)
        return next(future.result() for future, _sent in futures if future.done())

    def timed_call(self, client: Any, request: Any) -> tuple[float, Any]:
        """A single call without re-sends (the paths are warm when this is used)."""
        started = time.perf_counter()
        future = client.call_async(request)
        self.spin_until(future.done, 30.0, "an answer")
        return time.perf_counter() - started, future.result()

    def call_many(
        self, client: Any, requests: list[Any], window: int, accept: Callable[[Any], bool]
    ) -> tuple[list[Any], Counter[str]]:
        """Keep ``window`` calls outstanding; re-send unanswered ones and refused ones
        (``accept`` false, e.g. 429) until every request has an accepted answer."""
        answers: list[Any] = [None] * len(requests)
        stats: Counter[str] = Counter()
        outstanding: dict[int, tuple[Any, float]] = {}
        retry_at: dict[int, float] = {}
        next_index = 0
        done = 0
        while done < len(requests):
            now = time.monotonic()
            for index, (future, sent) in list(outstanding.items()):
                if future.done():
                    del outstanding[index]
                    answer = future.result()
                    stats[f"status_{answer.status_code}"] += 1
                    if accept(answer):
                        answers[index] = answer
                        done += 1
                    else:
                        retry_at[index] = now + 0.05
                elif now - sent > RESEND_AFTER_S:
                    client.remove_pending_request(future)
                    del outstanding[index]
                    retry_at[index] = now
                    stats["resent_unanswered"] += 1
            for index, due in list(retry_at.items()):
                if len(outstanding) >= window:
                    break
                if due <= now:
                    del retry_at[index]
                    stats["resent"] += 1
                    outstanding[index] = (client.call_async(requests[index]), now)
            while len(outstanding) < window and next_index < len(requests):
                outstanding[next_index] = (client.call_async(requests[next_index]), now)
                next_index += 1
            self.executor.spin_once(timeout_sec=0.002)
        return answers, stats

    def wait_finished(self, keys: list[str], started: float) -> float:
        """When the last of ``keys`` became final: from result events while they flow;
        when they stall (a keep-last topic may drop), from CheckKey for the missing keys."""
        missing = [key for key in keys if key not in self.finished]
        give_up = time.monotonic() + max(120.0, len(keys) / 20)
        while missing:
            if time.monotonic() > give_up:
                raise SystemExit(f"{len(missing)} commands never became final")
            seen = len(self.finished)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and len(self.finished) == seen:
                self.executor.spin_once(timeout_sec=0.005)
            missing = [key for key in missing if key not in self.finished]
            if missing and len(self.finished) == seen:
                checks, _ = self.call_many(
                    self.check,
                    [CheckKey.Request(client_id=CLIENT, idempotency_key=k) for k in missing],
                    64,
                    lambda answer: True,
                )
                now = time.perf_counter()
                for key, answer in zip(missing, checks, strict=True):
                    if answer.state in FINAL_STATES:
                        self.finished.setdefault(key, now)
                        self.finished_by_check += 1
                missing = [key for key in missing if key not in self.finished]
        return max(self.finished[key] for key in keys)

    def world_state(self) -> dict[str, Any]:
        response = self.call(self.world, GetWorldState.Request(), 60.0, "the world state")
        state: dict[str, Any] = json.loads(response.state_json)
        return state


def submit_request(key: str, robot_id: str, wait_s: float) -> SubmitCommand.Request:
    return SubmitCommand.Request(
        client_id=CLIENT,
        idempotency_key=key,
        robot_id=robot_id,
        command_type="dock",
        payload_json=json.dumps({"dock": dock_of(robot_id)}),
        wait_timeout_sec=wait_s,
    )


def py_spy() -> str | None:
    found = shutil.which("py-spy") or (BIN / "py-spy")
    return str(found) if Path(found).exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-commands", type=int, default=200)
    parser.add_argument("--commands", type=int, default=3000, help="throughput phase size")
    parser.add_argument(
        "--robots",
        type=lambda text: [int(size) for size in text.split(",") if size],
        default=[50],
        help="fleet size, or sizes (e.g. 50,200,500,1000): one whole run each, then a table",
    )
    parser.add_argument("--robot-capacity", type=int, default=16)
    parser.add_argument("--window", type=int, default=64, help="outstanding submits")
    parser.add_argument("--hosts", type=int, default=2, help="agent_host processes")
    parser.add_argument("--host-threads", type=int, default=4, help="with --host-executor multi")
    parser.add_argument("--host-executor", default="events", choices=["events", "multi", "single"])
    parser.add_argument(
        "--profile",
        nargs="?",
        const="orchestrator",
        default="",
        help="py-spy these processes (comma-separated: orchestrator, agents_1, world, ...) "
        "in the throughput and each scaling phase; alone: the orchestrator",
    )
    parser.add_argument("--keep-logs", type=Path, help="copy the children's log here")
    parser.add_argument(
        "--keep-profiles", type=Path, help="copy the raw py-spy profiles into this directory"
    )
    parser.add_argument(
        "--store-url", help="orchestrators share this postgresql:// database (default: LMDB)"
    )
    parser.add_argument(
        "--postgres", action="store_true", help="share a throwaway local PostgreSQL server"
    )
    parser.add_argument("--replicas", type=int, default=1, help="orchestrator replicas")
    parser.add_argument(
        "--scaling",
        type=lambda text: [int(size) for size in text.split(",") if size],
        default=[],
        help="after the rest, phases of these sizes in a row (e.g. 1000,10000,100000)",
    )
    options = parser.parse_args()
    sizes: list[int] = options.robots
    figures: dict[int, dict[str, str]] = {}
    for size in sizes:
        if len(sizes) > 1:
            print(f"# --- robots={size} ---", flush=True)
        with recorded(figures.setdefault(size, {})):
            bench_size(argparse.Namespace(**{**vars(options), "robots": size}))
    if len(sizes) > 1:
        print_size_table(figures)


def bench_size(options: argparse.Namespace) -> None:
    if options.postgres and not options.store_url:
        with LocalPostgres() as database:
            options.store_url = database.url
            bench_fleet(options)
    else:
        bench_fleet(options)


class _Recorder(io.TextIOBase):
    """Passes printed lines on, and keeps each ``name=value`` for the table."""

    def __init__(self, into: dict[str, str], out: Any) -> None:
        self._into, self._out, self._partial = into, out, ""

    def write(self, text: str) -> int:
        self._out.write(text)
        self._out.flush()
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            name, sep, value = line.partition("=")
            if sep and " " not in name:
                self._into[name] = value
        return len(text)


@contextlib.contextmanager
def recorded(into: dict[str, str]) -> Iterator[None]:
    with contextlib.redirect_stdout(_Recorder(into, sys.stdout)):
        yield


# The table's columns: (heading, how to read it from one size's figures).
def _agents_cpu(f: dict[str, str]) -> str:
    hosts = [v for k, v in sorted(f.items()) if k.startswith("cpu_us_per_command_agents_")]
    return "/".join(hosts[1:] or hosts)  # agents_0 holds the latency robot alone


TABLE: list[tuple[str, Callable[[dict[str, str]], str]]] = [
    ("commands/s", lambda f: f.get("throughput_commands_per_s", "?")),
    ("bare ceiling/s", lambda f: f.get("bare_ceiling_commands_per_s", "?")),
    ("fraction of bare", lambda f: f.get("throughput_fraction_of_bare_ceiling", "?")),
    ("submit->final p50 ms", lambda f: f.get("submit_to_final_p50_ms", "?")),
    ("orchestrator CPU us/cmd", lambda f: f.get("cpu_us_per_command_orchestrator", "?")),
    (
        "bare orchestrator CPU us/cmd",
        lambda f: f.get("bare_ceiling_cpu_us_per_command_bare_orchestrator", "?"),
    ),
    ("each host's CPU us/cmd", _agents_cpu),
    ("start-up s", lambda f: f.get("startup_s", "?")),
    ("restarted orchestrator sees all s", lambda f: f.get("restart_sees_fleet_s", "?")),
    (
        "idle CPU % orchestrator/host",
        lambda f: (
            f"{f.get('idle_cpu_percent_orchestrator', '?')}/"
            f"{f.get('idle_cpu_percent_agents_1', '?')}"
        ),
    ),
    (
        "memory MB orchestrator/host",
        lambda f: f"{f.get('rss_anon_mb_orchestrator', '?')}/{f.get('rss_anon_mb_agents_1', '?')}",
    ),
    (
        "DDS endpoints/robot orchestrator/agents",
        lambda f: (
            f"{f.get('dds_endpoints_per_robot_orchestrator', '?')}/"
            f"{f.get('dds_endpoints_per_robot_agents', '?')}"
        ),
    ),
    ("zero loss", lambda f: f.get("throughput_zero_loss", "?")),
]


def print_size_table(figures: dict[int, dict[str, str]]) -> None:
    """One row per size, and each cost's ratio to the smallest size's (the goal: flat)."""
    print("| robots | " + " | ".join(heading for heading, _ in TABLE) + " |")
    print("|---" * (len(TABLE) + 1) + "|")
    for size, found in figures.items():
        print(f"| {size} | " + " | ".join(read(found) for _, read in TABLE) + " |")
    smallest, largest = min(figures), max(figures)
    # Memory per robot as the slope between sizes: a process's fixed heap (the
    # interpreter, rclpy, the message types) would dominate a plain division.
    sizes = sorted(figures)
    for low, high in itertools.pairwise(sizes):
        for name, robots_served in (("orchestrator", 1.0), ("agents_1", 0.5)):
            try:
                grown = float(figures[high][f"rss_anon_mb_{name}"]) - float(
                    figures[low][f"rss_anon_mb_{name}"]
                )
            except (KeyError, ValueError):
                continue
            added = (high - low) * robots_served
            print(f"rss_anon_kb_per_added_robot_{name}_{low}_to_{high}={grown * 1024 / added:.0f}")
    for name in (
        "cpu_us_per_command_orchestrator",
        "bare_ceiling_cpu_us_per_command_bare_orchestrator",
        "submit_to_final_p50_ms",
        "bare_service_round_trip_p50_ms",
    ):
        try:
            ratio = float(figures[largest][name]) / float(figures[smallest][name])
        except (KeyError, ValueError, ZeroDivisionError):
            continue
        print(f"{name}_{largest}_vs_{smallest}={ratio:.2f}")


def bench_fleet(options: argparse.Namespace) -> None:
    if options.replicas > 1 and not options.store_url:
        raise SystemExit("--replicas > 1 needs --store-url or --postgres")
    with (
        lease_domain_id() as domain_id,
        lease_domain_id() as bare_domain_id,
        tempfile.TemporaryDirectory() as scratch_name,
    ):
        scratch = Path(scratch_name)
        env = isolated_environment(domain_id)
        # The bare pipeline in a domain of its own: in the fleet's, its processes' 7
        # endpoints per robot were discovered and matched by every fleet process too (a
        # third of a 1,000-robot domain's endpoints), and the fleet's by it.
        bare_env = isolated_environment(bare_domain_id)
        robots = write_fleet(scratch / "fleet.yaml", options.robots, options.robot_capacity)
        logs = open(scratch / "children.log", "wb")  # noqa: SIM115
        children: dict[str, subprocess.Popen[bytes]] = {}
        argvs: dict[str, list[str]] = {}

        def spawn(name: str, argv: list[str]) -> None:
            # Not the repo root as cwd: ``python -c`` would import the source tree, which
            # lacks the generated interfaces, instead of the installed package.
            argvs[name] = argv
            children[name] = subprocess.Popen(
                argv,
                env=bare_env if name.startswith("bare_") else env,
                stdout=logs,
                stderr=logs,
                cwd=scratch,
            )

        spawn(
            "world",
            [str(BIN / "world_simulator"), "--ros-args", "-p", f"fleet_file:={scratch}/fleet.yaml"],
        )
        for replica in range(1, options.replicas + 1):
            # Replica 1 serves /fleet, the API the bench calls; the others share its work.
            name = "orchestrator" if replica == 1 else f"orchestrator_{replica}"
            argv = [str(BIN / "orchestrator"), "--ros-args"]
            if replica > 1:
                argv += ["-r", f"__ns:=/fleet/{name}"]
            argv += ["-p", f"fleet_file:={scratch}/fleet.yaml"]
            argv += ["-p", f"store_dir:={scratch}/orchestrator"]
            if options.store_url:
                argv += ["-p", f"store_url:={options.store_url}", "-p", f"replica_name:={name}"]
                argv += ["-p", f"api_namespace:={'/fleet' if replica == 1 else '/fleet/' + name}"]
            spawn(name, argv)
        # The latency robot runs in a process of its own, as an onboard agent does; the
        # others share --hosts agent_host processes (one Python process per simulated robot
        # would not fit on a small machine).
        others = robots[1:]
        hosts = max(1, min(options.hosts, len(others)))
        groups = [robots[:1]] + [others[index::hosts] for index in range(hosts) if others]
        for index, group in enumerate(groups):
            spawn(
                f"agents_{index}",
                [
                    str(BIN / "agent_host"),
                    "--fleet",
                    f"{scratch}/fleet.yaml",
                    "--store-dir",
                    f"{scratch}/agents",
                    "--robots",
                    ",".join(group),
                    "--time-scale",
                    "0",
                    "--threads",
                    str(options.host_threads),
                    "--executor",
                    options.host_executor,
                ],
            )
        spawn("echo", [sys.executable, "-c", ECHO])

        def start_bare() -> None:
            """The bare ceiling's processes, shaped like the fleet's (bare_pipeline.py);
            started once the fleet is measured: starting beside it, their 1,000 nodes
            took half of the two cores from the fleet's own start-up."""
            bare = [sys.executable, str(Path(__file__).with_name("bare_pipeline.py"))]
            spawn("bare_orchestrator", [*bare, "orchestrator", "--robots", ",".join(robots)])
            spawn("bare_world", [*bare, "world"])
            for index, group in enumerate(groups):
                spawn(f"bare_agents_{index}", [*bare, "agents", "--robots", ",".join(group)])

        context = rclpy.Context()
        rclpy.init(context=context, domain_id=domain_id)
        bare_context = rclpy.Context()
        rclpy.init(context=bare_context, domain_id=bare_domain_id)
        try:
            bench = Bench(context)
            bench.bare_side = Bench(bare_context)
            run(
                bench,
                options,
                robots,
                scratch,
                children,
                respawn=lambda name: spawn(name, argvs[name]),
                start_bare=start_bare,
            )
        finally:
            for child in children.values():
                child.send_signal(signal.SIGTERM)
            for child in children.values():
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    child.kill()
            context.try_shutdown()
            bare_context.try_shutdown()
            logs.close()
            if options.keep_logs:
                shutil.copy(scratch / "children.log", options.keep_logs)
            if options.keep_profiles:
                options.keep_profiles.mkdir(parents=True, exist_ok=True)
                for folded in scratch.glob("*.folded"):
                    shutil.copy(folded, options.keep_profiles)


def run(
    bench: Bench,
    options: argparse.Namespace,
    robots: list[str],
    scratch: Path,
    children: dict[str, subprocess.Popen[bytes]],
    *,
    respawn: Callable[[str], None],
    start_bare: Callable[[], None],
) -> None:
    started_up, started_up_wall = time.perf_counter(), time.time()
    # Warm-up doubles as the readiness check: one completed command per robot proves the
    # whole path (submit, dispatch, agent, world, result) is matched in the DDS graph.
    bench.call(bench.echo, submit_request("probe", robots[0], 0.0), 60.0, "the echo server")
    warm = [submit_request(f"warm-{robot}", robot, 30.0) for robot in robots]
    bench.call_many(bench.submit, warm, 16, lambda answer: answer.state in FINAL_STATES)
    print(f"startup_s={time.perf_counter() - started_up:.1f}")
    # Where that went: until the orchestrator had heard every robot (its log), the rest
    # is the first command to each.
    online = robots_online_since(scratch, started_up_wall, 0)[0]
    if len(online) == len(robots):
        print(f"startup_orchestrator_heard_all_s={max(online.values()) - started_up_wall:.1f}")

    # --- (a) latency, both paths interleaved so that they see the same machine load ---------
    robot = robots[0]
    for index in range(20):
        bench.timed_call(bench.echo, submit_request(f"warm-echo-{index}", robot, 0.0))
        bench.timed_call(bench.submit, submit_request(f"warm-lat-{index}", robot, 10.0))
    bare, submit = [], []
    wall: dict[str, tuple[float, float]] = {}  # latency key: (sent, answered), wall clock
    for index in range(options.latency_commands):
        elapsed, _ = bench.timed_call(bench.echo, submit_request(f"echo-{index}", robot, 0.0))
        bare.append(elapsed)
        sent = time.time()
        elapsed, answer = bench.timed_call(
            bench.submit, submit_request(f"lat-{index}", robot, 10.0)
        )
        wall[f"lat-{index}"] = (sent, time.time())
        if answer.state != COMPLETED:
            raise SystemExit(f"lat-{index}: expected COMPLETED, got {answer}")
        submit.append(elapsed)
    fsync = fdatasync_seconds(scratch)
    for name, samples in (
        ("bare_service_round_trip", bare),
        ("submit_to_final", submit),
        ("fdatasync", fsync),
    ):
        print(f"{name}_p50_ms={statistics.median(samples) * 1e3:.3f}")
        print(f"{name}_p99_ms={percentile(samples, 0.99) * 1e3:.3f}")
    ratio = statistics.median(submit) / statistics.median(bare)
    budget = 2 * statistics.median(bare) + 3 * statistics.median(fsync)
    print(f"submit_vs_bare_p50_ratio={ratio:.2f}")
    print(f"latency_goal_p50_ms={budget * 1e3:.3f}")
    print(f"latency_goal_met={statistics.median(submit) <= budget}")
    latency_breakdown(bench, wall, scratch, robot)

    # Fixed costs, for the "where the time goes" split: CPU of each process while the
    # fleet is up and nothing is submitted (timers, status traffic).
    pids = {name: child.pid for name, child in children.items()}
    # After a pause: the last latency command's after-effects (the robot's idle status,
    # the event log's commit) are not idle cost. An idle robot's heartbeat comes every
    # 10 s: the window is as long, so that it holds one of each robot's.
    settled = time.perf_counter()
    bench.spin_until(lambda: time.perf_counter() - settled > 2.0, 10.0, "the pause")
    idle_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    idle_started = time.perf_counter()
    bench.spin_until(lambda: time.perf_counter() - idle_started > 10.0, 30.0, "the idle window")
    idle_s = time.perf_counter() - idle_started
    for name, pid in sorted(pids.items()):
        used = cpu_seconds(pid) - idle_before[name]
        print(f"idle_cpu_percent_{name}={100 * used / idle_s:.1f}")
    print_memory_per_robot(pids, robots, options.hosts)
    print_dds_endpoints(bench, len(robots))

    # --- (b) sustained throughput -------------------------------------------------------------
    count = options.commands
    keys = [f"tp-{index}" for index in range(count)]
    targets = [robots[index % len(robots)] for index in range(count)]
    requests = [submit_request(k, r, 0.0) for k, r in zip(keys, targets, strict=True)]
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    client_cpu_before = time.process_time()
    events_before = bench.tally.copy()
    profiled = [name for name in options.profile.split(",") if name]
    profilers = start_profilers(profiled, pids, scratch, "throughput")
    started = time.perf_counter()
    _answers, stats = bench.call_many(
        bench.submit,
        requests,
        options.window,
        lambda answer: answer.status_code in (200, 202, 409),
    )
    submitted = time.perf_counter()
    finished_at = bench.wait_finished(keys, started)
    stop_profilers(profilers)
    elapsed = finished_at - started
    cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    client_cpu = time.process_time() - client_cpu_before

    # Verdict: the orchestrator's own view of every key, then the world's side effects.
    checks, _ = bench.call_many(
        bench.check,
        [CheckKey.Request(client_id=CLIENT, idempotency_key=k) for k in keys],
        options.window,
        lambda answer: True,
    )
    states = Counter(answer.state for answer in checks)
    failure = next((a for a in checks if a.state != COMPLETED), None)
    world = bench.world_state()
    effects = world["side_effects"]
    per_command = [
        len(effects.get(r, {}).get(robot_key(CLIENT, k), []))
        for k, r in zip(keys, targets, strict=True)
    ]
    print(f"throughput_commands={count}")
    print(f"throughput_robots={len(robots)}")
    print(f"throughput_window={options.window}")
    print(f"throughput_submit_phase_s={submitted - started:.2f}")
    print(f"throughput_s={elapsed:.2f}")
    print(f"throughput_commands_per_s={count / elapsed:.0f}")
    bench.print_events("throughput", events_before, options.commands)
    print(f"throughput_submit_answers={dict(sorted(stats.items()))}")
    print(f"throughput_final_seen_by_check_not_event={bench.finished_by_check}")
    print(f"throughput_completed_at_orchestrator={states.get(COMPLETED, 0)}")
    print(f"throughput_other_states={ {s: n for s, n in states.items() if s != COMPLETED} }")
    if failure is not None:
        print(f"throughput_first_failure={failure.status_code} {failure.result_json}")
    print(f"throughput_world_side_effects={sum(per_command)}")
    print(f"throughput_world_max_side_effects_per_key={max(per_command, default=0)}")
    print(f"world_max_side_effects_per_key_all={world['max_side_effects_per_key']}")
    lost = sum(1 for n in per_command if n == 0)
    doubled = sum(1 for n in per_command if n > 1)
    zero_loss = lost == 0 and doubled == 0 and states.get(COMPLETED, 0) == count
    print(f"throughput_zero_loss={zero_loss}")
    for name, used in sorted(cpu.items()):
        if not name.startswith("bare_"):
            print(f"cpu_us_per_command_{name}={used / count * 1e6:.0f}")
    print(f"cpu_us_per_command_bench_client={client_cpu / count * 1e6:.0f}")
    print(f"cpu_cores_busy={(sum(cpu.values()) + client_cpu) / elapsed:.2f}")
    for name in profiled:
        print_profile(name, scratch / f"{name}.throughput.folded")
    if not zero_loss:
        raise SystemExit(f"loss: {lost} commands without a side effect, {doubled} doubled")
    restart_orchestrator(bench, children, pids, respawn=respawn, robots=robots, scratch=scratch)
    # Only now the bare pipeline: beside the fleet its start-up took half the two cores
    # from the fleet's start-up, and during the other phases it would skew them. It is
    # warmed through every robot's path before it is measured.
    start_bare()
    pids.update({name: child.pid for name, child in children.items()})
    try:
        ceiling = bare_ceiling(bench, options, targets, pids)
    except SystemExit as failure:  # the fleet's figures stand without it
        print(f"bare_ceiling_unavailable={failure}")
        ceiling = 0.0
    if ceiling:
        print(f"throughput_fraction_of_bare_ceiling={count / elapsed / ceiling:.3f}")
    for phase, size in enumerate(options.scaling, start=1):
        scaling_phase(bench, options, robots, pids, scratch, phase=phase, size=size)
    if options.scaling:
        # The machine drifts over a long run (±30 % here), and a slower machine looks like
        # a cost that grows with N. The bare pipeline has no state to grow: measured again
        # after the last phase, its change is the machine's, to set the phases against.
        after = bare_ceiling(bench, options, targets, pids, label="bare_ceiling_after_scaling")
        print(f"bare_ceiling_after_scaling_vs_before={after / ceiling:.2f}")


def start_profilers(
    names: list[str], pids: dict[str, int], scratch: Path, phase: str
) -> list[subprocess.Popen[bytes]]:
    """py-spy on each named process, writing ``<name>.<phase>.folded`` (raw) in scratch."""
    tool = py_spy()
    if tool is None:
        return []
    return [
        subprocess.Popen(
            [
                tool,
                "record",
                "--pid",
                str(pids[name]),
                "--format",
                "raw",
                "--output",
                str(scratch / f"{name}.{phase}.folded"),
                "--nonblocking",
                "--rate",
                "200",
                # Only the thread holding the GIL: Python work, not threads parked in
                # rcl's wait or in a queue (which py-spy cannot always tell from work).
                "--gil",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name in names
    ]


def stop_profilers(profilers: list[subprocess.Popen[bytes]]) -> None:
    for profiler in profilers:
        profiler.send_signal(signal.SIGINT)
    for profiler in profilers:
        profiler.wait(timeout=120)


def scaling_phase(
    bench: Bench,
    options: argparse.Namespace,
    robots: list[str],
    pids: dict[str, int],
    scratch: Path,
    *,
    phase: int,
    size: int,
) -> None:
    """``size`` more commands through the same fleet, whose stores already hold every
    earlier phase's records: commands/s and CPU per command must stay flat as N grows.
    The verdict is the world's (exactly one side effect per key); CheckKey per key would
    take longer than the phase itself at 100k."""
    keys = [f"s{phase}-{index}" for index in range(size)]
    targets = [robots[index % len(robots)] for index in range(size)]
    requests = [submit_request(k, r, 0.0) for k, r in zip(keys, targets, strict=True)]
    fleet = {name: pid for name, pid in pids.items() if not name.startswith(("bare_", "echo"))}
    profiled = [name for name in options.profile.split(",") if name]
    profilers = start_profilers(profiled, pids, scratch, f"scaling{phase}")
    cpu_before = {name: cpu_seconds(pid) for name, pid in fleet.items()}
    events_before, offline_before = bench.tally.copy(), bench.offline
    started = time.perf_counter()
    bench.call_many(
        bench.submit, requests, options.window, lambda answer: answer.status_code in (200, 202)
    )
    elapsed = bench.wait_finished(keys, started) - started
    stop_profilers(profilers)
    used_by = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in fleet.items()}
    used = sum(used_by.values())
    effects = bench.world_state()["side_effects"]
    per_command = [
        len(effects.get(r, {}).get(robot_key(CLIENT, k), []))
        for k, r in zip(keys, targets, strict=True)
    ]
    print(f"scaling_{phase}_{size}_commands_per_s={size / elapsed:.0f}")
    print(f"scaling_{phase}_{size}_cpu_us_per_command_fleet={used / size * 1e6:.0f}")
    bench.print_events(f"scaling_{phase}_{size}", events_before, size)
    print(f"scaling_{phase}_{size}_robots_gone_offline={bench.offline - offline_before}")
    for name, seconds in sorted(used_by.items()):
        print(f"scaling_{phase}_{size}_cpu_us_per_command_{name}={seconds / size * 1e6:.0f}")
    for name, pid in sorted(fleet.items()):
        # Anonymous memory is the Python heap; file-backed is mostly the LMDB maps, whose
        # touched pages count in RSS as the files grow but are the page cache's to drop.
        anon, file = rss_mb(pid)
        print(f"scaling_{phase}_{size}_rss_anon_mb_{name}={anon:.0f}")
        print(f"scaling_{phase}_{size}_rss_file_mb_{name}={file:.0f}")
    print(f"scaling_{phase}_{size}_exactly_once={all(n == 1 for n in per_command)}")
    for name in profiled:
        print_profile(f"scaling_{phase}_{name}", scratch / f"{name}.scaling{phase}.folded")


def restart_orchestrator(
    bench: Bench,
    children: dict[str, subprocess.Popen[bytes]],
    pids: dict[str, int],
    *,
    respawn: Callable[[str], None],
    robots: list[str],
    scratch: Path,
) -> None:
    """Stop the orchestrator (SIGTERM), start it again under the running fleet, and time
    until it has seen every robot: each robot's ``robot_online`` in its event log, read
    from disk (an event published before this client re-matched would be missed). Then a
    command through it, to show it serves."""
    old = children["orchestrator"]
    old.send_signal(signal.SIGTERM)
    old.wait(timeout=30)
    started = time.time()
    respawn("orchestrator")
    pids["orchestrator"] = children["orchestrator"].pid
    seen: dict[str, float] = {}
    after = 0
    deadline = time.monotonic() + 300.0
    while len(seen) < len(robots):
        if time.monotonic() > deadline:
            raise SystemExit(f"the restarted orchestrator saw {len(seen)}/{len(robots)} robots")
        found, after = robots_online_since(scratch, started, after)
        for robot_id, stamp in found.items():
            seen.setdefault(robot_id, stamp)
        bench.spin_until(lambda: True, 1.0, "")
        time.sleep(0.2)
    print(f"restart_sees_fleet_s={max(seen.values()) - started:.1f}")
    print(f"restart_sees_half_s={sorted(seen.values())[len(seen) // 2] - started:.1f}")
    answer = bench.call(
        bench.submit, submit_request("after-restart", robots[-1], 30.0), 60.0, "a submit"
    )
    if answer.state != COMPLETED:
        raise SystemExit(f"after the restart: expected COMPLETED, got {answer}")


def robots_online_since(
    scratch: Path, since: float, after_sequence: int
) -> tuple[dict[str, float], int]:
    """Each robot's first ``robot_online`` in the orchestrator's event log stamped at or
    after ``since`` (wall clock), among events after ``after_sequence``; and the last
    sequence read."""
    first: dict[str, float] = {}
    with (
        contextlib.suppress(Exception),
        LmdbEventLog(
            EventLogConfig(path=scratch / "orchestrator" / "events"), readonly=True
        ) as log,
    ):
        for event in log.read(after_sequence=after_sequence):
            after_sequence = max(after_sequence, event.sequence)
            if event.event_type == EventType.ROBOT_ONLINE and event.stamp >= since:
                first.setdefault(event.robot_id, event.stamp)
    return first, after_sequence


def print_memory_per_robot(pids: dict[str, int], robots: list[str], hosts: int) -> None:
    """Anonymous RSS (the Python heap: the LMDB maps are file-backed) per robot the
    process serves: the orchestrator serves all; each host of ``hosts`` its share."""
    share = max(1, (len(robots) - 1) // max(1, hosts))
    for name in ("orchestrator", "agents_1"):
        if name in pids:
            anon, _file = rss_mb(pids[name])
            per = len(robots) if name == "orchestrator" else share
            print(f"rss_anon_mb_{name}={anon:.0f}")
            print(f"rss_anon_kb_per_robot_{name}={anon * 1024 / per:.0f}")


def print_dds_endpoints(bench: Bench, robots: int) -> None:
    """DDS endpoints (topic writers and readers, services' request and reply ones
    included) of each kind of process, from the ROS graph as this client discovered
    it, per robot; and the participants (one per process) of the domain."""
    node = bench.node
    by_kind: Counter[str] = Counter()
    participants: set[bytes] = set()
    for topic, _types in node.get_topic_names_and_types(no_demangle=True):
        infos = [
            *node.get_publishers_info_by_topic(topic, no_mangle=True),
            *node.get_subscriptions_info_by_topic(topic, no_mangle=True),
        ]
        for info in infos:
            participants.add(bytes(info.endpoint_gid)[:12])
            by_kind[_process_kind(info.node_name, info.node_namespace)] += 1
    print(f"dds_participants={len(participants)}")
    for kind, count in sorted(by_kind.items()):
        print(f"dds_endpoints_{kind}={count}")
        if kind in ("orchestrator", "agents"):
            print(f"dds_endpoints_per_robot_{kind}={count / robots:.1f}")


def _process_kind(node_name: str, namespace: str) -> str:
    """Which kind of process a node of this bench lives in, by its name."""
    if node_name.startswith("bare_") or namespace.startswith("/bare"):
        return "bare"
    if node_name.startswith(("agent_", "ros_action", "world_link")):
        return "agents"
    if node_name.startswith("orchestrator"):
        return "orchestrator"
    if node_name.startswith("world"):
        return "world"
    if node_name.startswith("bench") or node_name.startswith("echo"):
        return "bench"
    return "other"


def rss_mb(pid: int) -> tuple[float, float]:
    """(anonymous, file-backed) resident MB of a process."""
    kb = {"RssAnon": 0, "RssFile": 0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in kb:
            kb[name] = int(value.split()[0])
    return kb["RssAnon"] / 1024, kb["RssFile"] / 1024


def latency_breakdown(
    bench: Bench, wall: dict[str, tuple[float, float]], scratch: Path, robot_id: str
) -> None:
    """Where a lone command's time goes, hop by hop (medians, ms), from wall-clock stamps
    that all processes of this machine share: the client's send and answer, the
    orchestrator's claim and finish (its store), the dispatched event, and the robot's
    claim and finish (its store)."""
    store_settings = {"recover": False, "readonly": True}
    with IdempotencyStore.open(
        StoreConfig(path=scratch / "orchestrator" / "keys"), **store_settings
    ) as store:
        ours = {r.key: r for r in store.iter_records(scope=CLIENT) if r.key in wall}
    with IdempotencyStore.open(
        StoreConfig(path=scratch / "agents" / "robots" / robot_id), **store_settings
    ) as store:
        theirs = {r.key: r for r in store.iter_records()}
    hops: dict[str, list[float]] = {}
    for key, (sent, answered) in wall.items():
        mine, robot = ours.get(key), theirs.get(robot_key(CLIENT, key))
        dispatched = bench.dispatched_at.get(key)
        if mine is None or robot is None or dispatched is None:
            continue
        stamps = [
            ("submit_to_orchestrator_claim", sent, mine.created_at),
            ("claim_to_dispatched_event", mine.created_at, dispatched),
            ("dispatched_to_robot_claim", dispatched, robot.created_at),
            ("robot_claim_to_robot_finish", robot.created_at, robot.updated_at),
            ("robot_finish_to_orchestrator_finish", robot.updated_at, mine.updated_at),
            ("orchestrator_finish_to_answer", mine.updated_at, answered),
        ]
        for name, start, end in stamps:
            hops.setdefault(name, []).append(end - start)
    print(f"latency_breakdown_commands={len(next(iter(hops.values()), []))}")
    for name, samples in hops.items():
        print(f"latency_breakdown_{name}_p50_ms={statistics.median(samples) * 1e3:.2f}")


# Commands in flight at once through the bare pipeline: its topics' history depth.
BARE_CHUNK = bare_pipeline.QOS.depth


def bare_ceiling(
    bench: Bench,
    options: argparse.Namespace,
    targets: list[str],
    pids: dict[str, int],
    label: str = "bare_ceiling",
) -> float:
    """The same commands through bare_pipeline.py's processes: commands/s, CPU per
    command of each of them (what rclpy and DDS alone cost for the pattern), printed
    under ``label``, which also names the keys (each measurement needs fresh ones)."""
    bench = bench.bare_side
    keys = [f"{label}-{index}" for index in range(len(targets))]
    requests = [submit_request(k, r, 0.0) for k, r in zip(keys, targets, strict=True)]
    warm_bare_pipeline(bench, sorted(set(targets)), label)
    bare_pids = {name: pid for name, pid in pids.items() if name.startswith("bare_")}
    cpu_before = {name: cpu_seconds(pid) for name, pid in bare_pids.items()}
    client_cpu_before = time.process_time()
    started = time.perf_counter()
    # The bare pipeline has no flow control: past its topics' depth in flight, messages
    # were lost (2,000 commands timed out). Chunks of that depth, each drained before the
    # next, keep it whole; a drain's gap is one round trip.
    for first in range(0, len(keys), BARE_CHUNK):
        chunk = keys[first : first + BARE_CHUNK]
        bench.call_many(
            bench.bare_submit,
            requests[first : first + BARE_CHUNK],
            options.window,
            lambda answer: True,
        )
        bench.spin_until(
            lambda chunk=chunk: all(key in bench.bare_finished for key in chunk),
            max(120.0, len(chunk) / 20),
            "the bare pipeline's results",
        )
    elapsed = max(bench.bare_finished[key] for key in keys) - started
    client_cpu = time.process_time() - client_cpu_before
    rate = len(keys) / elapsed
    print(f"{label}_commands_per_s={rate:.0f}")
    for name, pid in sorted(bare_pids.items()):
        used = cpu_seconds(pid) - cpu_before[name]
        print(f"{label}_cpu_us_per_command_{name}={used / len(keys) * 1e6:.0f}")
    print(f"{label}_cpu_us_per_command_bench_client={client_cpu / len(keys) * 1e6:.0f}")
    return rate


def warm_bare_pipeline(bench: Bench, robots: list[str], label: str) -> None:
    """One command through every robot's bare path, re-sent (under a new key) until it
    comes back: the bare pipeline has no retries, and a message sent before its topics
    are matched is lost, which in the measured run would be a command that never ends."""
    pending = set(robots)
    deadline = time.monotonic() + 900.0
    for round_ in itertools.count():
        keys = {robot: f"{label}-probe-{round_}-{robot}" for robot in pending}
        bench.call_many(
            bench.bare_submit,
            [submit_request(key, robot, 0.0) for robot, key in keys.items()],
            64,
            lambda answer: True,
        )
        settle = time.monotonic() + 3.0
        bench.spin_until(
            lambda keys=keys, settle=settle: (
                time.monotonic() > settle
                or all(key in bench.bare_finished for key in keys.values())
            ),
            10.0,
            "the bare pipeline's probes",
        )
        pending = {robot for robot, key in keys.items() if key not in bench.bare_finished}
        if not pending:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the bare pipeline never answered for {len(pending)} robots")


def print_profile(name: str, folded: Path, top: int = 15) -> None:
    """Self and inclusive sample shares of one process's functions (py-spy raw)."""
    if not folded.exists():
        print(f"profile_{name}=unavailable (py-spy not installed or not permitted)")
        return
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack:
            continue
        weight = int(samples)
        frames = [f.split(" (")[0] + " (" + f.rsplit("/", 1)[-1] for f in stack.split(";")]
        total += weight
        own[frames[-1]] += weight
        for frame in set(frames):
            inclusive[frame] += weight
    print(f"profile_{name}_samples={total}")
    for frame, weight in own.most_common(top):
        print(f"profile_{name}_self_pct[{frame}]={100 * weight / total:.1f}")
    for frame, weight in inclusive.most_common(top + 10):
        print(f"profile_{name}_inclusive_pct[{frame}]={100 * weight / total:.1f}")


if __name__ == "__main__":
    main()
