"""The Gazebo backend's control logic, with a kinematic body standing in for Gazebo.

Gazebo cannot be installed here: support/kinematic_body.py integrates the velocity
commands in real time and answers with odometry and joint readings, as Gazebo's systems
would. The world is the real kinematic World, which still counts every side effect.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from fleet_idempotency.commands import parse_payload
from fleet_idempotency.description.layout import Slot, WorldConfig
from fleet_idempotency.geometry import Point, Pose
from fleet_idempotency.robots.backend import (
    Command,
    CommandRefused,
    ExecutionAborted,
    ExecutionFailed,
)
from fleet_idempotency.robots.gazebo_control import (
    STOP,
    GazeboRobot,
    GoToGoal,
    MotionSettings,
    wrap_angle,
)
from fleet_idempotency.sim.gazebo_names import ARM_REACH_JOINT, ARM_YAW_JOINT
from fleet_idempotency.sim.world import World
from fleet_idempotency.sim.world_link import LocalWorldLink

from support.kinematic_body import FAST_MOTION, BlindBody, FrozenOdometryBody, KinematicBody

# Faster than the real robots so that each real-time move takes about a second.
FAST = FAST_MOTION
GEOMETRY = WorldConfig(
    waypoints={"W1": Point(x=3.0, y=1.0), "BEHIND": Point(x=-2.0, y=0.0)},
    docks={"D1": Point(x=0.0, y=2.0)},
    slots={
        "A1": Slot(x=2.0, y=0.0, item="P-1"),
        "B1": Slot(x=2.0, y=2.0),
        "S1": Slot(x=10.0, y=11.0, kind="station", item="I-1"),
        "S2": Slot(x=9.0, y=10.0, kind="station"),
        "FAR": Slot(x=20.0, y=20.0, kind="station"),
    },
)


def command(command_type: str, payload: str, key: str = "k1", **kwargs: Any) -> Command:
    return Command(
        robot_id="r1",
        key=key,
        command_type=command_type,
        payload=parse_payload(command_type, payload),
        **kwargs,
    )


def robot(
    robot_type: str,
    body: KinematicBody,
    start: Pose,
    settings: MotionSettings = FAST,
    world: World | None = None,
) -> GazeboRobot:
    return GazeboRobot(
        "r1",
        robot_type,
        LocalWorldLink(world or World(GEOMETRY)),
        body,
        start,
        settings=settings,
        time_scale=0,
    )


def run(backend: GazeboRobot, cmd: Command) -> dict[str, Any]:
    backend.prepare(cmd)
    return backend.execute(cmd)


# --- the controller alone -----------------------------------------------------------------
@pytest.mark.parametrize("heading", [0.0, math.pi / 2, math.pi, -2.5, 3.1])
def test_controller_reaches_the_goal_from_any_heading(heading: float) -> None:
    controller = GoToGoal(MotionSettings(), max_linear_m_s=1.5)
    pose, dt = Pose(x=0.0, y=0.0, theta=heading), 0.05
    for _ in range(2000):
        if controller.arrived(pose, 4.0, -3.0):
            break
        velocity = controller.command(pose, 4.0, -3.0)
        assert abs(velocity.linear_m_s) <= 1.5
        assert abs(velocity.angular_rad_s) <= MotionSettings().max_angular_rad_s
        assert velocity.linear_m_s >= 0  # never backs up blindly
        theta = pose.theta + velocity.angular_rad_s * dt
        pose = Pose(
            x=pose.x + velocity.linear_m_s * math.cos(theta) * dt,
            y=pose.y + velocity.linear_m_s * math.sin(theta) * dt,
            theta=wrap_angle(theta),
        )
    assert controller.arrived(pose, 4.0, -3.0), pose
    assert controller.command(pose, 4.0, -3.0) == STOP


def test_controller_turns_on_the_spot_when_the_goal_is_behind() -> None:
    velocity = GoToGoal(MotionSettings(), 1.5).command(Pose(theta=0.0), -5.0, 0.0)
    assert velocity.linear_m_s == 0
    assert velocity.angular_rad_s != 0


@pytest.mark.parametrize(
    "pose",
    [
        Pose(x=math.nan, y=0.0),
        Pose(x=0.0, y=math.inf),
        Pose(x=0.0, y=0.0, theta=math.nan),
        Pose(x=-math.inf, y=math.nan, theta=math.inf),
        None,
    ],
)
def test_controller_stops_without_a_usable_fix(pose: Pose | None) -> None:
    controller = GoToGoal(MotionSettings(), 1.5)
    assert controller.command(pose, 1.0, 1.0) == STOP
    assert not controller.arrived(pose, 1.0, 1.0)


def test_arrival_tolerance_cannot_exceed_the_resume_tolerance() -> None:
    with pytest.raises(ValueError, match="arrival_tolerance_m"):
        MotionSettings(arrival_tolerance_m=0.5)


# --- moves --------------------------------------------------------------------------------
def test_a_move_drives_to_the_waypoint_and_stops_there() -> None:
    body = KinematicBody(Pose(x=0.0, y=0.0, theta=math.pi))  # facing away from W1
    world = World(GEOMETRY)
    backend = robot("amr", body, Pose(), world=world)
    result = run(backend, command("move_to_waypoint", '{"waypoint": "W1"}'))
    assert body.true_pose.distance_to(3.0, 1.0) <= FAST.arrival_tolerance_m
    assert body.velocity == (0.0, 0.0)  # not left driving on the last command
    assert result["target"] == "W1"
    assert math.hypot(result["pose"]["x"] - 3.0, result["pose"]["y"] - 1.0) <= 0.06
    assert world.side_effect_count("r1", "k1") == 1
    assert backend.pose().distance_to(3.0, 1.0) <= FAST.arrival_tolerance_m


def test_an_absolute_move_and_a_dock_arrive_too() -> None:
    body = KinematicBody(Pose())
    world = World(GEOMETRY)
    backend = robot("forklift", body, Pose(), world=world)
    run(backend, command("move_to_waypoint", '{"x": -1.0, "y": 1.5}'))
    assert body.true_pose.distance_to(-1.0, 1.5) <= FAST.arrival_tolerance_m
    run(backend, command("dock", '{"dock": "D1"}', key="k2"))
    assert body.true_pose.distance_to(0.0, 2.0) <= FAST.arrival_tolerance_m
    assert world.snapshot()["docked"] == {"r1": "D1"}


def test_a_resumed_move_that_already_arrived_is_not_driven_or_counted_again() -> None:
    body = KinematicBody(Pose(x=3.0, y=1.0))
    world = World(GEOMETRY)
    backend = robot("amr", body, Pose(), world=world)
    result = run(backend, command("move_to_waypoint", '{"waypoint": "W1"}', resumed=True))
    assert result["already_there"] is True
    assert body.velocity_commands == 0
    assert world.side_effect_count("r1", "k1") == 0


def test_garbage_odometry_stops_the_robot_and_fails_the_move_at_its_deadline() -> None:
    body = BlindBody(Pose())
    world = World(GEOMETRY)
    settings = FAST.model_copy(update={"move_timeout_base_s": 0.5, "move_timeout_per_m_s": 0.0})
    backend = robot("amr", body, Pose(), settings=settings, world=world)
    cmd = command("move_to_waypoint", '{"waypoint": "W1"}')
    backend.prepare(cmd)
    with pytest.raises(ExecutionFailed, match="no usable odometry"):
        backend.execute(cmd)
    assert body.velocity_commands > 0
    assert body.velocity == (0.0, 0.0)  # told to stop on every tick, never steered blind
    assert body.true_pose == Pose()
    assert world.side_effect_count("r1", "k1") == 0  # no arrival was counted
    assert math.isfinite(backend.pose().x)  # pose() keeps the last usable one


def test_odometry_that_stopped_arriving_counts_as_no_fix() -> None:
    body = FrozenOdometryBody(Pose())
    settings = FAST.model_copy(
        update={"move_timeout_base_s": 1.0, "move_timeout_per_m_s": 0.0, "fix_max_age_s": 0.2}
    )
    backend = robot("amr", body, Pose(), settings=settings)
    cmd = command("move_to_waypoint", '{"waypoint": "W1"}')
    with pytest.raises(ExecutionFailed, match="no usable odometry"):
        backend.execute(cmd)
    assert body.velocity == (0.0, 0.0)


def test_a_robot_that_cannot_get_there_in_time_fails_with_its_distance() -> None:
    body = KinematicBody(Pose())
    slow = MotionSettings(max_linear_m_s=0.2, move_timeout_base_s=0.5, move_timeout_per_m_s=0.0)
    backend = robot("amr", body, Pose(), settings=slow)
    with pytest.raises(ExecutionFailed, match=r"did not reach \(3, 1\) within 0.5 s \(still"):
        backend.execute(command("move_to_waypoint", '{"waypoint": "W1"}'))
    assert body.velocity == (0.0, 0.0)


@pytest.mark.parametrize(
    ("command_type", "payload", "reason"),
    [
        ("move_to_waypoint", '{"waypoint": "W9"}', "unknown waypoint 'W9'"),
        ("dock", '{"dock": "D9"}', "unknown dock 'D9'"),
        ("pick", '{"slot": "S1"}', "is a station slot; a forklift handles pallet slots"),
        ("pick", '{"slot": "Z9"}', "unknown slot 'Z9'"),
    ],
)
def test_bad_targets_are_refused_before_anything_moves(
    command_type: str, payload: str, reason: str
) -> None:
    body = KinematicBody(Pose())
    backend = robot("forklift", body, Pose())
    with pytest.raises(CommandRefused, match=reason):
        backend.prepare(command(command_type, payload))
    assert body.velocity_commands == 0


def test_a_command_type_the_robot_cannot_do_is_refused() -> None:
    backend = robot("amr", KinematicBody(Pose()), Pose())
    with pytest.raises(CommandRefused, match="amr cannot pick"):
        backend.prepare(command("pick", '{"slot": "A1"}'))


def test_shutdown_mid_move_aborts_and_stops_the_robot() -> None:
    body = KinematicBody(Pose())
    slow = FAST.model_copy(update={"max_linear_m_s": 0.05})
    backend = robot("amr", body, Pose(), settings=slow)
    outcome: list[BaseException] = []

    def drive() -> None:
        try:
            backend.execute(command("move_to_waypoint", '{"waypoint": "W1"}'))
        except BaseException as error:
            outcome.append(error)

    worker = threading.Thread(target=drive)
    worker.start()
    while body.velocity == (0.0, 0.0) and worker.is_alive():
        worker.join(0.01)  # until it drives
    backend.shutdown()
    worker.join(5.0)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ExecutionAborted)
    assert body.velocity == (0.0, 0.0)


# --- pick and place -----------------------------------------------------------------------
def test_a_forklift_picks_and_places_a_pallet_in_the_world_and_in_gazebo() -> None:
    body = KinematicBody(Pose())
    world = World(GEOMETRY)
    backend = robot("forklift", body, Pose(), world=world)
    picked = run(backend, command("pick", '{"slot": "A1"}', key="k-pick"))
    assert picked["item"] == "P-1"
    assert body.true_pose.distance_to(2.0, 0.0) <= FAST.arrival_tolerance_m
    placed = run(backend, command("place", '{"slot": "B1"}', key="k-place"))
    assert placed["item"] == "P-1"
    assert body.carry_requests == [("attach", "P-1"), ("detach", "P-1")]
    assert world.snapshot()["slots"]["B1"] == "P-1"


def test_a_pick_from_an_empty_slot_fails_after_starting_and_attaches_nothing() -> None:
    body = KinematicBody(Pose())
    world = World(GEOMETRY)
    backend = robot("forklift", body, Pose(), world=world)
    cmd = command("pick", '{"slot": "B1"}')
    backend.prepare(cmd)  # a valid target: the emptiness is found on arrival
    with pytest.raises(ExecutionFailed, match="slot 'B1' is empty"):
        backend.execute(cmd)
    assert body.carry_requests == []
    assert world.side_effect_count("r1", "k1") == 1  # the attempt is on record


def test_an_arm_turns_and_extends_to_the_station_before_picking() -> None:
    base = Pose(x=10.0, y=10.0, theta=0.0)
    body = KinematicBody(base, joints={ARM_YAW_JOINT: 0.0, ARM_REACH_JOINT: 0.0})
    backend = robot("arm", body, base)
    result = run(backend, command("pick", '{"slot": "S1"}'))  # straight "up" from the base
    assert result["item"] == "I-1"
    yaw = body.joint_position(ARM_YAW_JOINT)
    reach = body.joint_position(ARM_REACH_JOINT)
    assert yaw is not None and abs(yaw.position - math.pi / 2) <= FAST.joint_tolerance
    assert reach is not None and abs(reach.position - 1.0) <= FAST.joint_tolerance
    run(backend, command("place", '{"slot": "S2"}', key="k2"))  # to its left
    yaw = body.joint_position(ARM_YAW_JOINT)
    assert yaw is not None and abs(abs(yaw.position) - math.pi) <= FAST.joint_tolerance
    assert body.carry_requests == [("attach", "I-1"), ("detach", "I-1")]
    assert body.velocity_commands == 0  # an arm never drives


def test_an_arm_refuses_a_station_out_of_reach() -> None:
    base = Pose(x=10.0, y=10.0)
    backend = robot("arm", KinematicBody(base), base)
    with pytest.raises(CommandRefused, match="out of reach"):
        backend.prepare(command("place", '{"slot": "FAR"}'))


def test_an_arm_without_joint_readings_fails_on_timeout() -> None:
    base = Pose(x=10.0, y=10.0)
    body = KinematicBody(base)  # no joints: no JointState ever arrives
    backend = robot("arm", body, base, settings=FAST.model_copy(update={"joint_timeout_s": 0.3}))
    with pytest.raises(ExecutionFailed, match="shoulder_yaw has no reading"):
        run(backend, command("pick", '{"slot": "S1"}'))
    assert body.carry_requests == []
