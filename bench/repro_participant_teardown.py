"""Fast DDS 2.14's participant-teardown deadlock, forced with gdb, in plain rclpy: a process
stopped while a discovery callback is in progress spins in ``set_listener`` for good, with
the GIL held; then the same with ``ros/teardown_backstop.py`` around the teardown.

Rarely hit by chance (about one node stop in 200-500 under ``ros2 launch``'s Ctrl-C:
``bench/bench_launch_sigint.py``), so the race is set up by hand: gdb stops the victim's
main thread where it starts destroying its participant, lets a peer announce a new
publisher and stops the victim's receive thread inside the discovery callback, lets the
main thread enter ``set_listener`` (seen spinning: its clock read 300 times), then lets
everything go. Each victim arms a 10 s SIGALRM deadline, as the package's nodes do.
Needs gdb (Debian package ``gdb``).

    .venv/bin/python bench/repro_participant_teardown.py [--runs 3]
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
from pathlib import Path

from fleet_idempotency.bringup.system_tools import GDB, MissingSystemTool
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id

VICTIM = """
import os, signal, sys, threading, time
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import String
from fleet_idempotency.ros.teardown_backstop import participant_teardown_backstop

stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
node = Node("victim")
endpoints = [node.create_publisher(String, f"t{i}", 10) for i in range(3)]
executor = SingleThreadedExecutor()
executor.add_node(node)
def spin():
    try:
        executor.spin()
    except Exception:
        pass  # the shutdown's ExternalShutdownException
spinning = threading.Thread(target=spin, daemon=True)
spinning.start()
print("ready", flush=True)
while not stop.wait(0.05):
    pass
signal.setitimer(signal.ITIMER_REAL, 10.0)  # the nodes' shutdown deadline
rclpy.try_shutdown()
spinning.join(0.5)
if sys.argv[1] == "backstop":
    with participant_teardown_backstop("victim"):
        node.destroy_node()
else:
    node.destroy_node()
print("destroyed", flush=True)
"""

PEER = """
import os, sys, time
import rclpy
from rclpy.node import Node
from std_msgs.msg import String
rclpy.init()
node = Node("peer")
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
node.create_publisher(String, "late_topic", 10)
time.sleep(60)
"""

# Run by gdb's Python; every step waits for the one before (all-stop mode).
GDB_STEPS = """
import gdb, os
def run(command):
    try:
        gdb.execute(command)
    except gdb.error as error:  # the call interrupted by the breakpoint, expected
        print("gdb:", str(error).splitlines()[0], flush=True)
for command in [
    "set pagination off", "set confirm off",
    "handle SIGTERM nostop noprint pass", "handle SIGALRM nostop noprint pass",
    f"attach {os.environ['VICTIM_PID']}",
    "break rmw_fastrtps_shared_cpp::destroy_participant",
    f"shell kill -TERM {os.environ['VICTIM_PID']}",
    "continue",
    "delete",
    "break ParticipantListener::on_publisher_discovery",
    f"shell touch {os.environ['GO_FILE']}",
    "call (int)usleep(4000000)",
    "delete", "set scheduler-locking on", "thread 1", "continue",
    "break std::chrono::_V2::system_clock::now", "ignore 3 300", "continue",
    "bt 3",
    "delete", "set scheduler-locking off", "detach",
]:
    run(command)
"""


def one_run(work: Path, variant: str, run: int) -> tuple[int, float, bool, str]:
    """Exit code, seconds from gdb's detach to the exit, whether the spin was seen, the
    victim's output."""
    go_file = work / f"go-{variant}-{run}"
    steps = work / "steps.py"
    steps.write_text(GDB_STEPS)
    with lease_domain_id() as domain:
        env = isolated_environment(domain)
        peer = subprocess.Popen([sys.executable, "-c", PEER, str(go_file)], env=env)
        victim = subprocess.Popen(
            [sys.executable, "-c", VICTIM, variant],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert victim.stdout is not None
            if victim.stdout.readline().strip() != "ready":
                raise RuntimeError("the victim did not start")
            time.sleep(1.0)  # the peer discovered
            traced = subprocess.run(
                ["gdb", "-batch", "-x", str(steps)],
                env={**os.environ, "VICTIM_PID": str(victim.pid), "GO_FILE": str(go_file)},
                cwd=work,  # a core file of gdb's own, if it fails, stays in the temp dir
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            (work / f"gdb-{variant}-{run}.txt").write_text(traced.stdout + traced.stderr)
            detached = time.monotonic()
            code = victim.wait(timeout=30)
            took = time.monotonic() - detached
            spun = "DomainParticipant::set_listener" in traced.stdout
            return code, took, spun, victim.stdout.read()
        finally:
            for process in (victim, peer):
                if process.poll() is None:
                    process.kill()
                    process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="forced races per variant")
    options = parser.parse_args()
    try:
        GDB.find()
    except MissingSystemTool as missing:
        sys.exit(f"repro_participant_teardown: {missing}")
    work = Path(tempfile.mkdtemp(prefix="repro_teardown_"))
    try:
        print("variant   run  exit  s-after-release  spin-seen  output")
        for variant in ("plain", "backstop"):
            for run in range(1, options.runs + 1):
                code, took, spun, output = one_run(work, variant, run)
                shown = "SIGALRM" if code == -signal.SIGALRM else str(code)
                last = output.strip().splitlines()[-1][:110] if output.strip() else "-"
                print(f"{variant:9} {run:3}  {shown:7} {took:10.2f}  {spun!s:9}  {last}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
