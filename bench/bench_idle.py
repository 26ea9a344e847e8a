"""Idle CPU of an idle fleet, per process (prints name=value lines).

Brings up the fleet of ``bench_orchestrator.py`` (world, orchestrator, one agent in a
process of its own, the other robots on ``--hosts`` ``agent_host`` processes), proves it
ready with one completed command per robot, lets it settle, then measures each process's
CPU (utime + stime from /proc) over ``--idle-s`` seconds while nothing is submitted.
Also prints the DDS endpoints per process as the graph shows them (subscriptions,
publishers, services, clients; timers are not in the graph).

With ``--compare-bin DIR`` a second, identical fleet runs from another installation's
``bin/`` (e.g. a venv of main) in a domain of its own, measured in the same window, so
that before and after see the same machine load: figures are printed as
``idle_cpu_percent_<process>=<this> (<compared>)``.

    .venv/bin/python bench/bench_idle.py [--robots 50] [--hosts 2] [--idle-s 20]
        [--compare-bin /path/to/other/venv/bin] [--profile DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import rclpy
from bench_orchestrator import FINAL_STATES, Bench, cpu_seconds, submit_request, write_fleet

from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id

BIN = Path(sys.prefix) / "bin"


class Fleet:
    """One fleet's processes in one domain, started from ``bin``."""

    def __init__(self, label: str, bin_dir: Path, scratch: Path, options: Any) -> None:
        self.label = label
        self.scratch = scratch
        self.env = isolated_environment(options.domain_ids[label])
        self.robots = write_fleet(scratch / "fleet.yaml", options.robots, 16)
        self.logs = open(scratch / "children.log", "wb")  # noqa: SIM115
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        others = self.robots[1:]
        hosts = max(1, min(options.hosts, len(others)))
        self.groups = [self.robots[:1]] + [others[i::hosts] for i in range(hosts) if others]
        fleet = f"{scratch}/fleet.yaml"
        self._spawn(
            "world", [str(bin_dir / "world_simulator"), "--ros-args", "-p", f"fleet_file:={fleet}"]
        )
        self._spawn(
            "orchestrator",
            [
                str(bin_dir / "orchestrator"),
                "--ros-args",
                "-p",
                f"fleet_file:={fleet}",
                "-p",
                f"store_dir:={scratch}/orchestrator",
            ],
        )
        for index, group in enumerate(self.groups):
            self._spawn(
                f"agents_{index}",
                [
                    str(bin_dir / "agent_host"),
                    "--fleet",
                    fleet,
                    "--store-dir",
                    f"{scratch}/agents",
                    "--robots",
                    ",".join(group),
                    "--time-scale",
                    "0",
                ],
            )

    def _spawn(self, name: str, argv: list[str]) -> None:
        # Not the repo as cwd: ``python -c`` would import the source tree (no interfaces).
        self.children[name] = subprocess.Popen(
            argv, env=self.env, stdout=self.logs, stderr=self.logs, cwd=self.scratch
        )

    def process_of_node(self, name: str, namespace: str) -> str:
        robot = namespace.rsplit("/", 1)[-1] if name == "agent_driver" else ""
        if name.startswith("world_link_"):
            robot = name.removeprefix("world_link_")
        for index, group in enumerate(self.groups):
            if robot in group:
                return f"agents_{index}"
        if name.startswith("orchestrator"):
            return "orchestrator"
        if name.startswith("world"):
            return "world"
        return "other"

    def stop(self) -> None:
        for child in self.children.values():
            child.send_signal(signal.SIGTERM)
        for child in self.children.values():
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
        self.logs.close()


def endpoints(bench: Bench, fleet: Fleet) -> dict[str, Counter[str]]:
    node = bench.node
    per_process: dict[str, Counter[str]] = {}
    for name, namespace in node.get_node_names_and_namespaces():
        process = fleet.process_of_node(name, namespace)
        if process == "other":
            continue
        counts = per_process.setdefault(process, Counter())
        counts["nodes"] += 1
        counts["subscriptions"] += len(node.get_subscriber_names_and_types_by_node(name, namespace))
        counts["publishers"] += len(node.get_publisher_names_and_types_by_node(name, namespace))
        counts["services"] += len(node.get_service_names_and_types_by_node(name, namespace))
        counts["clients"] += len(node.get_client_names_and_types_by_node(name, namespace))
    return per_process


def ready(bench: Bench, fleet: Fleet) -> None:
    """One completed command per robot: the whole path is matched in the DDS graph."""
    warm = [submit_request(f"warm-{robot}", robot, 30.0) for robot in fleet.robots]
    bench.call_many(bench.submit, warm, 8, lambda answer: answer.state in FINAL_STATES)


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(BIN / "py-spy")
    return found if Path(found).exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--robots", type=int, default=50)
    parser.add_argument("--hosts", type=int, default=2, help="agent_host processes")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--settle-s", type=float, default=5.0, help="after readiness")
    parser.add_argument("--compare-bin", type=Path, help="a second fleet from this bin/")
    parser.add_argument("--profile", type=Path, help="py-spy each process (this fleet) here")
    options = parser.parse_args()

    with ExitStack() as stack:
        labels = ["this"] + (["compared"] if options.compare_bin else [])
        options.domain_ids = {label: stack.enter_context(lease_domain_id()) for label in labels}
        fleets: dict[str, Fleet] = {}
        contexts: list[Any] = []
        try:
            for label in labels:
                scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                bin_dir = BIN if label == "this" else options.compare_bin
                fleets[label] = Fleet(label, bin_dir, scratch, options)
            benches = {}
            for label in labels:
                context = rclpy.Context()
                rclpy.init(context=context, domain_id=options.domain_ids[label])
                contexts.append(context)
                benches[label] = Bench(context)
            started = time.perf_counter()
            for label in labels:
                ready(benches[label], fleets[label])
            print(f"startup_s={time.perf_counter() - started:.1f}")
            settle_until = time.monotonic() + options.settle_s
            while time.monotonic() < settle_until:
                for bench in benches.values():
                    bench.executor.spin_once(timeout_sec=0.05)
            measure(options, fleets, benches)
        finally:
            for fleet in fleets.values():
                fleet.stop()
            for context in contexts:
                context.try_shutdown()


def measure(options: Any, fleets: dict[str, Fleet], benches: dict[str, Bench]) -> None:
    pids = {
        (label, name): child.pid
        for label, fleet in fleets.items()
        for name, child in fleet.children.items()
    }
    profilers = []
    if options.profile and (tool := py_spy()):
        options.profile.mkdir(parents=True, exist_ok=True)
        for name, child in fleets["this"].children.items():
            profilers.append(
                subprocess.Popen(
                    [
                        tool,
                        "record",
                        "--pid",
                        str(child.pid),
                        "--format",
                        "raw",
                        "--output",
                        str(options.profile / f"{name}.folded"),
                        "--nonblocking",
                        "--duration",
                        str(int(options.idle_s)),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    before = {key: cpu_seconds(pid) for key, pid in pids.items()}
    started = time.perf_counter()
    # The bench's own nodes are not spun meanwhile: their wake-ups are not the fleet's.
    time.sleep(options.idle_s)
    elapsed = time.perf_counter() - started
    used = {key: cpu_seconds(pid) - before[key] for key, pid in pids.items()}
    for profiler in profilers:
        profiler.send_signal(signal.SIGINT)  # py-spy lags on a loaded machine: stop it now
        try:
            profiler.wait(timeout=60)
        except subprocess.TimeoutExpired:
            profiler.kill()
    print(f"idle_window_s={elapsed:.1f}")
    print(f"load_average={os.getloadavg()[0]:.2f}")
    for name in fleets["this"].children:
        figures = [f"{100 * used[(label, name)] / elapsed:.1f}" for label in fleets]
        shown = figures[0] + (f" ({figures[1]})" if len(figures) > 1 else "")
        print(f"idle_cpu_percent_{name}={shown}")
    for label, fleet in fleets.items():
        for process, counts in sorted(endpoints(benches[label], fleet).items()):
            print(f"endpoints_{label}_{process}={dict(sorted(counts.items()))}")
    if profilers:
        for name in fleets["this"].children:
            print_top(name, options.profile / f"{name}.folded")


def print_top(name: str, folded: Path, top: int = 8) -> None:
    """Where a process spends its samples while the fleet idles (py-spy raw)."""
    if not folded.exists():
        print(f"profile_{name}=unavailable")
        return
    own: Counter[str] = Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if stack:
            frame = stack.split(";")[-1]
            own[frame.split(" (")[0] + " (" + frame.rsplit("/", 1)[-1]] += int(samples)
            total += int(samples)
    for frame, weight in own.most_common(top):
        print(f"profile_{name}_self_pct[{frame}]={100 * weight / max(total, 1):.1f}")


if __name__ == "__main__":
    main()
