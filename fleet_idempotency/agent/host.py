"""Host several agent-driver nodes in one process (large simulated fleets).

Each hosted agent is the same AgentDriver node, in its own namespace, with its own
parameters and its own LMDB store; they only share the process, its executor, one timer
for their periodic jobs and one /diagnostics publisher, which saves the ~80 MB and the
start-up time of one Python process per simulated robot, and an idle host's CPU.

    agent_host --fleet config/fleet.yaml --store-dir /tmp/fleet [--robots amr_1,amr_2]
        [--time-scale 0.05] [--executor events|single|multi] [--threads 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import rclpy
from rclpy.context import Context
from rclpy.parameter import Parameter

from fleet_idempotency.agent.node import AgentDriver, AgentProcessWork
from fleet_idempotency.description.agent_parameters import agent_namespace, agent_parameters
from fleet_idempotency.description.fleet import FleetConfig, RobotSpec, load_fleet
from fleet_idempotency.ros.node_main import run_nodes
from fleet_idempotency.ros.qos import drop_default_event_handlers
from fleet_idempotency.ros.side_thread import NO_TYPE_DESCRIPTION_SERVICE


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agent_host", description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", type=Path, required=True, help="fleet description (YAML)")
    parser.add_argument("--store-dir", type=Path, required=True)
    parser.add_argument("--robots", default="", help="comma-separated ids (default: all)")
    parser.add_argument("--time-scale", type=float, default=None)
    parser.add_argument("--threads", type=int, default=8, help="with --executor multi")
    parser.add_argument(
        "--executor",
        default="events",
        choices=["events", "multi", "single"],
        help="events: rclpy's EventsExecutor, the periodic work run between events",
    )
    parser.add_argument("--keyring-dir", type=Path, default=None, help="see bringup/keys.py")
    return parser.parse_args(argv)


def hosted_agents(
    fleet: FleetConfig,
    robots: list[RobotSpec],
    *,
    store_dir: Path,
    time_scale: float | None = None,
    keyring_dir: Path | None = None,
    fleet_file: Path | None = None,
    context: Context | None = None,
    shared: AgentProcessWork | None = None,
) -> list[AgentDriver]:
    """The agents of one process, sharing one timer for their periodic jobs (or none:
    ``shared`` made with ``timer=False``, whose work the caller's loop runs)."""
    agents = []
    # One timer for the whole process runs every agent's heartbeat, diagnostics, GC and
    # keyring reloads (agent/periodic.py): per-agent timers woke the executor ~50 times a
    # second for 25 agents, each wake-up walking all their entities in Python.
    shared = AgentProcessWork() if shared is None else shared
    for index, robot in enumerate(robots):
        parameters = agent_parameters(
            fleet,
            robot,
            store_dir=store_dir,
            time_scale=time_scale,
            robot_index=index,
            keyring_dir=keyring_dir,
            fleet_file=fleet_file,
        )
        overrides = [Parameter(name, value=value) for name, value in parameters.items()]
        overrides.append(NO_TYPE_DESCRIPTION_SERVICE)
        # No parameter or type description services nor QoS event handlers on hosted
        # agents: 25 agents' 175 services and 150 handlers would be in the one executor's
        # wait set, rebuilt on every wake-up (idle CPU). Their parameters come from the
        # fleet file and are fixed at start anyway.
        agents.append(
            AgentDriver(
                namespace=agent_namespace(robot.id),
                parameter_overrides=overrides,
                start_parameter_services=False,
                # Their log lines go to the host's console and log file, not /rosout:
                # a /rosout writer per hosted robot was one more endpoint per robot that
                # every process of the domain discovers and matches.
                enable_rosout=False,
                process_work=shared,
                qos_event_handlers=False,
                context=context,
            )
        )
    if agents:
        shared.start(agents[0])
        drop_default_event_handlers(agents[0])  # those of the /diagnostics publisher
    return agents


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv if argv is None else argv
    options = parse_arguments(rclpy.utilities.remove_ros_args(argv)[1:])
    fleet = load_fleet(options.fleet)
    wanted = [r for r in options.robots.split(",") if r]
    robots = [r for r in fleet.robots if not wanted or r.id in wanted]
    events = options.executor == "events"
    shared = AgentProcessWork(timer=not events)

    def make_agents() -> list[AgentDriver]:
        return hosted_agents(
            fleet,
            robots,
            store_dir=options.store_dir,
            time_scale=options.time_scale,
            keyring_dir=options.keyring_dir,
            fleet_file=options.fleet,
            shared=shared,
        )

    run_nodes(
        "agent_host",
        make_agents,
        threads=options.threads,
        executor=options.executor,
        args=argv,
        between_events=shared.work.run_if_due if events else None,
    )


if __name__ == "__main__":
    main()
