"""Several agents hosted in one process behave as separate robots with separate stores."""

from __future__ import annotations

import json
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
        lambda: all(fleet.serving(r) for r in robots),
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
    assert children.processes["host"].poll() is None
