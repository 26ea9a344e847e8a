"""launch_testing checks of ``robot.launch.py`` on its own, as a robot runs it onboard:
the agent comes up with no world simulator and no orchestrator on the network, serves
CheckKey, stays up (never respawned) past what used to be its world timeout, and
executes a command once the world simulator and the orchestrator start later; it exits
0 on launch's shutdown.

Run by test/bringup/test_launch.py, which leases the DDS domain:

    ROS_DOMAIN_ID=<id> ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST \\
    launch_test test/bringup/launch_checks/robot_checks.py store_dir:=<dir>
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path
from typing import Any, ClassVar

import launch
import launch_testing.actions
import launch_testing.asserts
from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from fleet_idempotency.bringup.plan import launch_plan
from fleet_idempotency.bringup.processes import executable
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.description.resources import default_fleet_file

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads us by path
from fleet_probe import FleetProbe, child_pid

ROBOT = "forklift_1"
AGENT = ("agent_driver", f"__ns:=/fleet/{ROBOT}")
SERVING_TIMEOUT_S = 30.0
# An agent without its world used to abort after 30 s; it now waits without a deadline,
# probing the world every 2 s. A window of several probes and launch's respawn delay (2 s)
# shows it neither exits nor is respawned, without paying the old 30 s again.
STAYS_UP_S = 8.0


def generate_test_description() -> launch.LaunchDescription:
    share = Path(get_package_share_directory("fleet_idempotency"))
    robot = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(share / "launch" / "robot.launch.py")),
        launch_arguments={
            "robot_id": ROBOT,
            "store_dir": LaunchConfiguration("store_dir"),
            "speed": "50",
        }.items(),
    )
    return launch.LaunchDescription(
        [DeclareLaunchArgument("store_dir"), robot, launch_testing.actions.ReadyToTest()]
    )


class TestRobotAlone(unittest.TestCase):
    probe: ClassVar[FleetProbe]
    agent_pid: ClassVar[int | None] = None
    # The steps build on each other: after a failed one the rest only report it.
    failed: ClassVar[bool] = False

    @classmethod
    def setUpClass(cls) -> None:
        cls.probe = FleetProbe()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.probe.close()

    def setUp(self) -> None:
        if TestRobotAlone.failed:
            self.skipTest("an earlier step failed")
        TestRobotAlone.failed = True  # until the step passes

    def passed(self) -> None:
        TestRobotAlone.failed = False

    def test_1_the_agent_serves_check_key_without_world_or_orchestrator(self) -> None:
        answer = self.probe.wait_robot_serving(ROBOT, timeout_s=SERVING_TIMEOUT_S)
        self.assertFalse(answer.found)
        TestRobotAlone.agent_pid = child_pid(*AGENT)
        self.assertIsNotNone(TestRobotAlone.agent_pid)
        self.passed()

    def test_2_the_agent_stays_up(self) -> None:
        until = time.monotonic() + STAYS_UP_S
        while time.monotonic() < until:
            self.assertEqual(child_pid(*AGENT), TestRobotAlone.agent_pid, "agent restarted")
            self.probe.executor.spin_once(timeout_sec=0.5)
        self.passed()

    def test_3_it_executes_once_world_and_orchestrator_start_later(
        self, test_args: dict[str, str]
    ) -> None:
        fleet_file = default_fleet_file()
        plan = launch_plan(
            load_fleet(fleet_file),
            fleet_file=fleet_file,
            store_dir=Path(test_args["store_dir"]) / "later",
            robots=[],
            with_http=False,
        )
        later = [
            subprocess.Popen([executable(spec.executable), *spec.ros_arguments()]) for spec in plan
        ]
        try:
            first = self.probe.submit(ROBOT, "pick", {"slot": "A1"}, key="robot-alone")
            self.assertEqual(first.status_code, 200, first.message)
            again = self.probe.submit(ROBOT, "pick", {"slot": "A1"}, key="robot-alone")
            self.assertTrue(again.replayed)
            self.assertEqual(again.result_json, first.result_json)
            self.assertEqual(child_pid(*AGENT), TestRobotAlone.agent_pid, "agent restarted")
        finally:
            for process in later:
                process.send_signal(signal.SIGINT)
            codes = [process.wait(timeout=20) for process in later]
        self.assertEqual(codes, [0] * len(later))
        self.passed()


@launch_testing.post_shutdown_test()
class TestCleanShutdown(unittest.TestCase):
    def test_the_agent_exits_0(self, proc_info: Any) -> None:
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0])
