"""Ctrl-C of ``ros2 launch fleet_idempotency fleet.launch.py``, N times: how launch and
each node exited, and every line showing a dirty exit (traceback, ``Exception ignored``).

Each run: a leased DDS domain, a free HTTP port, a fresh store; the fleet is started,
waited for (every node's ready line and the HTTP API's /readyz), then one SIGINT goes to
the launch's process group, as a terminal sends it. Needs the ROS 2 launch stack in the
venv (``scripts/setup.sh --test`` installs it from ../shared when present).

    .venv/bin/python bench/bench_launch_sigint.py [--runs 20] [--speed 20] [--presses 1]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from fleet_idempotency.bringup.launch_run import (
    LaunchOutcome,
    Ros2Launch,
    fleet_up,
    ros2_executable,
)
from fleet_idempotency.http.ports import available_port
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id

AGENTS = 6
READY_TIMEOUT_S = 90.0
EXIT_TIMEOUT_S = 60.0
# A clean stop takes ~1 s; past this the still-running nodes' stacks are saved.
SLOW_STOP_S = 3.0
BACKSTOP_LINE = "teardown did not finish"


def http_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def one_run(work: Path, speed: str, presses: int) -> LaunchOutcome:
    with lease_domain_id() as domain:
        port = available_port("127.0.0.1", 0)
        env = isolated_environment(domain)
        env["AMENT_PREFIX_PATH"] = os.pathsep.join(
            filter(None, [sys.prefix, env.get("AMENT_PREFIX_PATH", "")])
        )
        arguments = [
            "fleet_idempotency",
            "fleet.launch.py",
            f"store_dir:={work / 'store'}",
            f"speed:={speed}",
            f"http_port:={port}",
        ]
        with Ros2Launch(arguments, env, work / "launch.log") as launch:
            launch.wait_until(
                lambda text: fleet_up(text, AGENTS), READY_TIMEOUT_S, "every node ready"
            )
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not http_ready(port):
                if time.monotonic() > deadline:
                    raise TimeoutError("the HTTP API never answered /readyz 200")
                time.sleep(0.1)
            launch.interrupt(times=presses)
            assert launch.process is not None
            try:
                launch.process.wait(timeout=SLOW_STOP_S)
            except subprocess.TimeoutExpired:
                dump_stacks(launch.process.pid, work / "slow_stop_stacks.txt")
            return launch.wait(EXIT_TIMEOUT_S)


def dump_stacks(launch_pid: int, into: Path) -> None:
    """Every still-running child's threads (gdb: native, all; py-spy: Python), for a stop
    slower than it should be."""
    spy = Path(sys.executable).with_name("py-spy")
    children = Path(f"/proc/{launch_pid}/task/{launch_pid}/children")
    pids = children.read_text().split() if children.exists() else []
    with into.open("w") as sink:
        for pid in pids:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue  # exited meanwhile
            sink.write(f"--- {pid} {command.decode(errors='replace')}\n")
            sink.flush()
            # py-spy shows Python threads only; a hang inside DDS waits on one of its own.
            if shutil.which("gdb"):
                sink.write(f"--- {pid}: every thread, native (gdb)\n")
                sink.flush()
                subprocess.run(
                    ["gdb", "-p", pid, "-batch", "-ex", "thread apply all bt"],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    timeout=60,
                    check=False,
                )
            subprocess.run(
                [str(spy), "dump", "--native", "--pid", pid],
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=60,
                check=False,
            )
    print(f"    slow stop: stacks of {len(pids)} processes in {into}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--speed", default="20")
    parser.add_argument("--presses", type=int, default=1, help="SIGINTs per run, 5 ms apart")
    parser.add_argument("--keep", action="store_true", help="keep each run's logs")
    options = parser.parse_args()
    if ros2_executable() is None:
        sys.exit("no ros2 CLI here: run scripts/setup.sh --test with ../shared beside the repo")
    launch_codes: collections.Counter[int] = collections.Counter()
    node_codes: collections.Counter[int] = collections.Counter()
    dirty = backstops = 0
    root = Path(tempfile.mkdtemp(prefix="bench_launch_sigint_"))
    for run in range(1, options.runs + 1):
        work = root / f"run{run:02d}"
        work.mkdir()
        outcome = one_run(work, options.speed, options.presses)
        launch_codes[outcome.returncode] += 1
        node_codes.update(e.code for e in outcome.exits)
        dirty += not outcome.clean
        # A node whose DDS participant teardown deadlocked (ros/teardown_backstop.py).
        backstopped = (work / "launch.log").read_text(errors="replace").count(BACKSTOP_LINE)
        backstops += backstopped
        print(f"run {run:2d}: {outcome.summary()}; teardown backstops {backstopped}", flush=True)
        for line in outcome.problems[:10]:
            print(f"    {line}")
    print(f"runs={options.runs}")
    print(f"launch_exit_codes={dict(launch_codes)}")
    print(f"node_exit_codes={dict(node_codes)}")
    print(f"dirty_runs={dirty}")
    print(f"teardown_backstops={backstops}")
    print(f"logs={root}" if options.keep else "logs=removed (--keep to keep them)")
    if not options.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
