"""Several agents hosted in one process behave as separate robots with separate stores."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from support.fleet_harness import BIN, FLEET_FILE, FleetHarness
from support.ros_support import ChildProcesses, wait_for


def test_one_process_hosts_independent_agents(
    ros_context: Any, ros_env: dict[str, str], children: ChildProcesses, tmp_path: Path
) -> None:
    fleet = FleetHarness(ros_context, ros_env, children, tmp_path / "stores")
    fleet.start_world()
    robots = {
        "amr_1": ("dock", {"dock": "D1"}),
        "forklift_2": ("pick", {"slot": "A5"}),
        "arm_1": ("pick", {"slot": "S1"}),
    }
    children.spawn(
        "host",
        [
            str(BIN / "agent_host"),
            "--fleet",
            str(FLEET_FILE),
            "--store-dir",
            str(tmp_path / "stores"),
            "--robots",
            ",".join(robots),
            "--time-scale",
            "0",
        ],
        ros_env,
    )
    for robot_id in robots:
        fleet.track_robot(robot_id)
    wait_for(
        lambda: all(fleet.ready(r) for r in robots),
        executor=fleet.executor,
        what="the hosted agents",
        timeout_s=60.0,
    )

    # The same key on each robot: three operations, one per robot's own store.
    for robot_id, (command_type, payload) in robots.items():
        fleet.send(robot_id, "k-123", command_type, payload)
    finals = {r.robot_id: r for r in (fleet.final_for(robot_id, "k-123") for robot_id in robots)}
    assert {r.state for r in finals.values()} == {3}
    assert json.loads(finals["arm_1"].result_json)["item"] == "I-1"
    for robot_id in robots:
        assert fleet.side_effects(robot_id, "k-123") == 1
        assert (tmp_path / "stores" / "robots" / robot_id / "data.mdb").exists()
        # Served from the host's services node, under each robot's own name.
        status = fleet.check_key(robot_id, "k-123")
        assert status.found and status.state == 3
    host = children.processes["host"]
    assert host.poll() is None

    # Its events loop runs the periodic work between events (no timer): idle robots
    # still heartbeat (every idle_status_period_s, 10 s), the orchestrator's sign that
    # an agent alive to DDS still talks.
    stamps = {robot_id: _stamp_ns(fleet.statuses[robot_id]) for robot_id in robots}
    wait_for(
        lambda: all(_stamp_ns(fleet.statuses[r]) > stamps[r] for r in robots),
        executor=fleet.executor,
        what="a heartbeat from every idle hosted agent",
    )
    # The events loop is inside rclpy when SIGTERM shuts the context down: a clean exit.
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=30) == 0, children.log("host")[-3000:]


def _stamp_ns(status: Any) -> int:
    return int(status.stamp.sec) * 10**9 + int(status.stamp.nanosec)


def test_hosted_agents_share_one_timer_and_each_still_heartbeats(fleet: FleetHarness) -> None:
    """One periodic timer for the process, not one per agent and job (idle CPU), no QoS
    event handler nor check_key service in the executor's wait set (walked on every
    wake-up), one results writer for them all and no /rosout writer of theirs (DDS
    endpoints per robot), and every agent still sends its idle heartbeat (every
    idle_status_period_s) and its store status on /diagnostics."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.event_handler import EventHandler

    from fleet_idempotency.agent.host import hosted_agents
    from fleet_idempotency.description.fleet import load_fleet
    from fleet_idempotency.msg import RobotStatus

    config = load_fleet(FLEET_FILE)
    robots = [r for r in config.robots if r.id in ("amr_1", "forklift_1", "arm_1")]
    heartbeats: dict[str, int] = {r.id: 0 for r in robots}
    stores_seen: set[str] = set()

    def heard(message: Any) -> None:
        heartbeats[message.robot_id] += 1

    def diagnosed(array: Any) -> None:
        stores_seen.update(s.hardware_id for s in array.status if s.name.endswith("store"))

    for robot in robots:
        fleet.node.create_subscription(RobotStatus, f"/fleet/{robot.id}/status", heard, 10)
    fleet.node.create_subscription(DiagnosticArray, "/diagnostics", diagnosed, 10)
    agents = hosted_agents(
        config, robots, store_dir=fleet.store_dir, time_scale=0.0, context=fleet.node.context
    )
    try:
        assert sum(len(list(agent.timers)) for agent in agents) == 1
        assert not [w for a in agents for w in a.waitables if isinstance(w, EventHandler)]
        assert not [service for agent in agents for service in agent.services]
        assert not [p for a in agents for p in a.publishers if p.topic_name == "/fleet/results"]
        assert len({id(agent._results) for agent in agents}) == 1, "one shared results writer"
        rosout = fleet.node.get_publishers_info_by_topic("/rosout")
        assert rosout, "the test's own node logs to /rosout: the query sees writers"
        assert not [i for i in rosout if i.node_name == "agent_driver"]
        for agent in agents:
            fleet.executor.add_node(agent)
        fleet.spin_until(
            lambda: min(heartbeats.values()) >= 2,
            "the first status and an idle heartbeat from every hosted agent",
        )
        fleet.spin_until(
            lambda: stores_seen == set(heartbeats), "every hosted agent's store on /diagnostics"
        )
    finally:
        for agent in agents:
            fleet.executor.remove_node(agent)
            agent.shutdown()
            agent.destroy_node()
