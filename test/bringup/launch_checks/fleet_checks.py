"""launch_testing checks of ``fleet.launch.py``: every node ready; a ROS and an HTTP
submit complete and their retries replay; a kill -9 of an agent and of the orchestrator
is respawned by launch and a command completes after each; every node then exits 0 on
launch's shutdown with no traceback in any output.

Run by test/bringup/test_launch.py, which leases the DDS domain and picks the port:

    ROS_DOMAIN_ID=<id> ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST \\
    launch_test test/bringup/launch_checks/fleet_checks.py store_dir:=<dir> http_port:=<port>
"""

from __future__ import annotations

import os
import signal
import sys
import unittest
from pathlib import Path
from typing import Any

import launch
import launch_testing.actions
import launch_testing.asserts
from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from fleet_idempotency.bringup.launch_run import PROBLEM

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads us by path
from fleet_probe import FleetProbe, child_pid

ROBOTS = ("forklift_1", "forklift_2", "amr_1", "amr_2", "amr_3", "arm_1")


def generate_test_description() -> launch.LaunchDescription:
    share = Path(get_package_share_directory("fleet_idempotency"))
    fleet = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(share / "launch" / "fleet.launch.py")),
        launch_arguments={
            "store_dir": LaunchConfiguration("store_dir"),
            "http_port": LaunchConfiguration("http_port"),
            "speed": "50",
        }.items(),
    )
    return launch.LaunchDescription(
        [
            DeclareLaunchArgument("store_dir"),
            DeclareLaunchArgument("http_port"),
            fleet,
            launch_testing.actions.ReadyToTest(),
        ]
    )


class TestFleet(unittest.TestCase):
    probe: FleetProbe

    @classmethod
    def setUpClass(cls) -> None:
        cls.probe = FleetProbe()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.probe.close()

    # unittest runs the methods in name order: the numbers are the scenario's steps.
    def test_1_every_node_is_ready(self, test_args: dict[str, str]) -> None:
        self.probe.wait_ready(ROBOTS, http_port=int(test_args["http_port"]))

    def test_2_a_ros_submit_completes_and_its_retry_replays(self) -> None:
        first = self.probe.submit("amr_1", "dock", {"dock": "D1"}, key="ros-1")
        self.assertEqual(first.status_code, 200, first.message)
        self.assertFalse(first.replayed)
        again = self.probe.submit("amr_1", "dock", {"dock": "D1"}, key="ros-1")
        self.assertEqual(again.status_code, 200, again.message)
        self.assertTrue(again.replayed)
        self.assertEqual(again.result_json, first.result_json)

    def test_3_an_http_submit_completes_and_its_retry_replays(
        self, test_args: dict[str, str]
    ) -> None:
        port = int(test_args["http_port"])
        body = {"command_type": "pick", "payload": {"slot": "A1"}, "wait_timeout_sec": 30}
        first = self.probe.http_submit(port, "forklift_1", "http-1", body)
        self.assertEqual(first.status, 200, first.body)
        again = self.probe.http_submit(port, "forklift_1", "http-1", body)
        self.assertEqual(again.status, 200, again.body)
        self.assertEqual(again.headers.get("idempotent-replayed"), "true")
        self.assertEqual(again.body, first.body)

    def test_4_a_killed_agent_is_respawned_and_serves(self) -> None:
        self._kill_and_see_respawned("agent_driver", "__ns:=/fleet/amr_2")
        answer = self.probe.submit("amr_2", "dock", {"dock": "D2"}, key="after-agent-kill")
        self.assertEqual(answer.status_code, 200, answer.message)

    def test_5_a_killed_orchestrator_is_respawned_and_serves(self) -> None:
        self._kill_and_see_respawned("lib/fleet_idempotency/orchestrator", "--ros-args")
        answer = self.probe.submit("amr_3", "dock", {"dock": "D3"}, key="after-orch-kill")
        self.assertEqual(answer.status_code, 200, answer.message)

    def _kill_and_see_respawned(self, *marks: str) -> None:
        killed = child_pid(*marks)
        self.assertIsNotNone(killed, f"no process with {marks}")
        assert killed is not None
        os.kill(killed, signal.SIGKILL)
        respawned = self.probe.wait_for(
            lambda: (pid := child_pid(*marks)) is not None and pid != killed and pid,
            f"{marks} respawned",
        )
        self.assertNotEqual(respawned, killed)


@launch_testing.post_shutdown_test()
class TestCleanShutdown(unittest.TestCase):
    def test_every_node_exits_0(self, proc_info: Any) -> None:
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])

    def test_no_node_prints_a_traceback(self, proc_output: Any) -> None:
        problems = [
            f"{event.process_name}: {line}"
            for event in proc_output
            for line in event.text.decode(errors="replace").splitlines()
            if PROBLEM.search(line)
        ]
        self.assertEqual(problems, [])
