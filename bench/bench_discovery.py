"""Why a process restarted after a kill -9 is slow to be served: the DDS part alone.

Plain rclpy, none of this package's nodes: a service server stays up while a client
process is started again and again, each one ended by a kill -9 (or, with ``--clean``,
by SIGTERM). Each client prints how long after its spawn the server's service became
visible to it and when its first request was answered (re-sent every 0.1 s, since a
response to a client the server has not matched yet is dropped). With ``--hold-ports``,
the driver binds the discovery ports of each killed client's participant after it dies,
so that the next client cannot take the same participant id, and so the same ports,
while the server still counts the dead participant as alive (until its lease ends).

    .venv/bin/python bench/bench_discovery.py [--starts 8] [--clean] [--hold-ports]
        [--gap-s 0.3]

Prints ``discovery_<start>_visible_s`` / ``_answered_s`` lines and their medians.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time

import rclpy

from fleet_idempotency.bringup.port_hold import DOMAIN_GAIN, PORT_BASE, PortHold
from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id
from fleet_idempotency.srv import CheckKey

SERVICE = "/bench_discovery/check"


def serve() -> None:
    rclpy.init()
    node = rclpy.create_node("bench_discovery_server")
    node.create_service(CheckKey, SERVICE, lambda _request, response: response)
    print("serving", flush=True)
    rclpy.spin(node)


def call(spawned: float) -> None:
    rclpy.init()
    node = rclpy.create_node("bench_discovery_client")
    client = node.create_client(CheckKey, SERVICE)
    while not client.service_is_ready():
        time.sleep(0.005)
    visible = time.time()
    while True:
        future = client.call_async(CheckKey.Request())
        rclpy.spin_until_future_complete(node, future, timeout_sec=0.1)
        if future.done():
            break
        client.remove_pending_request(future)
    answered = time.time()
    print(f"{visible - spawned:.3f} {answered - spawned:.3f}", flush=True)

    def stop(_signal: int, _frame: object) -> None:
        rclpy.try_shutdown()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        time.sleep(0.1)


def discovery_ports(domain_id: int, participant_id: int) -> tuple[int, int]:
    """The participant's unicast metatraffic and user ports (the DDSI-RTPS defaults)."""
    base = PORT_BASE + DOMAIN_GAIN * domain_id
    return base + 10 + 2 * participant_id, base + 11 + 2 * participant_id


def drive(options: argparse.Namespace) -> None:
    with lease_domain_id() as domain_id:
        env = isolated_environment(domain_id)
        me = [sys.executable, __file__]
        server = subprocess.Popen([*me, "serve"], env=env, stdout=subprocess.PIPE, text=True)
        held: list[PortHold] = []
        visible: list[float] = []
        answered: list[float] = []
        try:
            assert server.stdout is not None
            server.stdout.readline()
            for start in range(options.starts):
                spawned = time.time()
                child = subprocess.Popen(
                    [*me, "call", repr(spawned)], env=env, stdout=subprocess.PIPE, text=True
                )
                assert child.stdout is not None
                seen, served = (float(part) for part in child.stdout.readline().split())
                visible.append(seen)
                answered.append(served)
                print(f"discovery_{start}_visible_s={seen:.3f}")
                print(f"discovery_{start}_answered_s={served:.3f}")
                time.sleep(0.5)
                child.send_signal(signal.SIGTERM if options.clean else signal.SIGKILL)
                child.wait()
                if options.hold_ports:
                    # The server is participant 0; with every killed client's ports held,
                    # client n (from 0) was participant n + 1.
                    ports = set(discovery_ports(domain_id, start + 1))
                    held.append(PortHold(ports, hold_s=3600.0))  # released when done
                time.sleep(options.gap_s)
        finally:
            server.kill()
            server.wait()
            for hold in held:
                hold.release()
        print(f"discovery_ended_by={'sigterm' if options.clean else 'kill_9'}")
        print(f"discovery_ports_held={options.hold_ports}")
        print(f"discovery_visible_median_s={statistics.median(visible):.3f}")
        print(f"discovery_answered_median_s={statistics.median(answered):.3f}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "call":
        call(float(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=8)
    parser.add_argument("--clean", action="store_true", help="end each client with SIGTERM")
    parser.add_argument("--hold-ports", action="store_true")
    parser.add_argument("--gap-s", type=float, default=0.3, help="from one end to the next start")
    drive(parser.parse_args())


if __name__ == "__main__":
    main()
