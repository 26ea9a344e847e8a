"""The kinematic robot's pose updates to the world: paced in simulated time, and bounded
in wall time however fast the simulation runs."""

from __future__ import annotations

import math

import pytest

from fleet_idempotency.commands import parse_payload
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.geometry import Pose
from fleet_idempotency.robots.backend import Command
from fleet_idempotency.robots.simulated import (
    MIN_TRAVEL_STEP_WALL_S,
    TRAVEL_STEP_S,
    SimulatedRobot,
)
from fleet_idempotency.sim.profiles import PROFILES
from fleet_idempotency.sim.world import World
from fleet_idempotency.sim.world_link import LocalWorldLink

from support.paths import REPO

FLEET = load_fleet(REPO / "config" / "fleet.yaml")


class CountingLink(LocalWorldLink):
    def __init__(self, world: World) -> None:
        super().__init__(world)
        self.poses: list[Pose] = []

    def set_pose(self, robot_id: str, pose: Pose) -> None:
        self.poses.append(pose)
        super().set_pose(robot_id, pose)


def drive(time_scale: float, x: float) -> tuple[CountingLink, SimulatedRobot]:
    """amr_1 from (0, 0) to (x, 0); returns the link that saw its pose updates."""
    link = CountingLink(World(FLEET.world))
    robot = SimulatedRobot("amr_1", "amr", link, Pose(x=0.0, y=0.0), time_scale=time_scale)
    link.poses.clear()  # the start pose the robot announced
    payload = parse_payload("move_to_waypoint", f'{{"x": {x}, "y": 0.0}}')
    robot.execute(Command("amr_1", "k", "move_to_waypoint", payload))
    return link, robot


@pytest.mark.parametrize(
    ("time_scale", "distance_m"),
    [(0.05, 3.0), (0.002, 20.0)],
    ids=["demo speed: every 0.5 simulated s", "chaos speed: bounded in wall time"],
)
def test_a_drive_updates_the_world_once_a_step_and_ends_at_its_target(
    time_scale: float, distance_m: float
) -> None:
    link, robot = drive(time_scale, distance_m)
    travel_s = distance_m / PROFILES["amr"].speed_m_s
    step_s = max(TRAVEL_STEP_S, MIN_TRAVEL_STEP_WALL_S / time_scale)
    assert len(link.poses) == math.ceil(travel_s / step_s)
    # Never more often than the wall-time bound, whatever the time scale.
    assert len(link.poses) <= math.ceil(travel_s * time_scale / MIN_TRAVEL_STEP_WALL_S)
    assert link.poses[-1].x == pytest.approx(distance_m)
    assert robot.pose().x == pytest.approx(distance_m)
    # Each update is a step along the way, in order.
    xs = [pose.x for pose in link.poses]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
