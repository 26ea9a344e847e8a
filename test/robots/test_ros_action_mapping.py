"""The ``ros_action`` backend's logic without ROS traffic: goal UUIDs from keys, goals
built from commands, outcomes from results, and the ``nav2`` preset's mapping of Nav2's
actions and error codes (tested on stand-ins with nav2_msgs' field layout; the test that
needs the real nav2_msgs is test_nav2_msgs.py)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from fleet_idempotency.commands import parse_payload
from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.robots.backend import (
    BackendContext,
    Command,
    ExecutionFailed,
    OutcomeUnknown,
)
from fleet_idempotency.robots.registry import BackendError, make_backend
from fleet_idempotency.robots.ros_action.config import ActionMapping, Outcomes, RosActionParams
from fleet_idempotency.robots.ros_action.goals import (
    STATUS_ABORTED,
    STATUS_CANCELED,
    STATUS_SUCCEEDED,
    STATUS_UNKNOWN,
    GoalError,
    TargetUnknown,
    build_goal,
    check_mapping,
    command_sources,
    goal_uuid,
    interpret,
    resolve_target,
)
from fleet_idempotency.robots.ros_action.nav2 import (
    DOCK_ROBOT_ERRORS,
    NAVIGATE_TO_POSE_ERRORS,
    Nav2Params,
    ros_action_params,
)

from support.paths import FLEET_FILE

LAYOUT = load_fleet(FLEET_FILE).world
GOAL_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def command(command_type: str, payload: dict[str, Any], key: str = "wms:k-1") -> Command:
    return Command("amr_1", key, command_type, parse_payload(command_type, json.dumps(payload)))


# --- stand-ins with nav2_msgs' field layout (geometry_msgs/PoseStamped etc.) --------------
@dataclass
class Header:
    frame_id: str = ""


@dataclass
class Point:
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0


@dataclass
class Quaternion:
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    w: float = 1.0


@dataclass
class PoseOnly:
    position: Point = field(default_factory=Point)
    orientation: Quaternion = field(default_factory=Quaternion)


@dataclass
class PoseStamped:
    header: Header = field(default_factory=Header)
    pose: PoseOnly = field(default_factory=PoseOnly)


@dataclass
class NavigateToPoseGoal:
    pose: PoseStamped = field(default_factory=PoseStamped)
    behavior_tree: str = ""


@dataclass
class NavigateToPoseResult:
    error_code: int = 0
    error_msg: str = ""


@dataclass
class DockRobotGoal:
    use_dock_id: bool = True
    dock_id: str = ""
    dock_pose: PoseStamped = field(default_factory=PoseStamped)
    dock_type: str = ""
    max_staging_time: float = 1000.0
    navigate_to_staging_pose: bool = True


@dataclass
class DockRobotResult:  # Jazzy's first releases: no error_msg
    success: bool = True
    error_code: int = 0
    num_retries: int = 0


NAV2 = ros_action_params(Nav2Params(fleet_file=str(FLEET_FILE), behavior_tree="bt.xml"))
NAVIGATE = NAV2.actions["move_to_waypoint"]
DOCK = NAV2.actions["dock"]


def test_goal_uuid_is_derived_from_the_robot_and_key_and_never_changes() -> None:
    first = goal_uuid("amr_1", "wms:k-1")
    assert first == goal_uuid("amr_1", "wms:k-1") and first.version == 5
    assert first != goal_uuid("amr_2", "wms:k-1") != goal_uuid("amr_1", "wms:k-2")
    # Pinned: a restarted agent of a newer release must ask for the goals it sent.
    assert str(first) == str(
        uuid.uuid5(uuid.UUID("5f0c6a2e-3d1b-5c52-9a47-7f3e1b2d9c80"), "amr_1\nwms:k-1")
    )


def test_a_goal_is_built_from_the_command_with_each_field_s_own_type() -> None:
    from fleet_idempotency.action import ExecuteCommand

    mapping = ActionMapping(
        action_name="drive",
        action_type="fleet_idempotency/action/ExecuteCommand",
        goal={
            "idempotency_key": "$key",
            "client_id": "$$not-a-source",
            "robot_id": "$target.x",  # a number into a string field: its JSON
            "command_type": "fixed",
            "payload_json": "$payload_json",
        },
    )
    check_mapping("move_to_waypoint", mapping, ExecuteCommand.Goal(), ExecuteCommand.Result())
    move = command("move_to_waypoint", {"y": 2, "x": 4})
    sources = command_sources(move, goal_id=GOAL_ID, frame_id="map", target=Target4())
    goal = build_goal(ExecuteCommand.Goal(), mapping, sources)
    assert goal.idempotency_key == "wms:k-1" and goal.client_id == "$not-a-source"
    assert goal.robot_id == "4.0" and goal.command_type == "fixed"
    assert goal.payload_json == '{"x":4.0,"y":2.0}'  # canonical: key order never matters


def Target4() -> Any:  # noqa: N802 - a tiny factory in the test
    from fleet_idempotency.robots.ros_action.goals import Target

    return Target(4.0, 2.0)


def test_navigate_to_pose_goal_from_a_waypoint_of_the_fleet_file() -> None:
    move = command("move_to_waypoint", {"waypoint": "W3"})
    check_mapping("move_to_waypoint", NAVIGATE, NavigateToPoseGoal(), NavigateToPoseResult())
    target = resolve_target(move, LAYOUT)
    goal = build_goal(
        NavigateToPoseGoal(),
        NAVIGATE,
        command_sources(move, goal_id=GOAL_ID, frame_id=NAV2.frame_id, target=target),
    )
    assert goal.pose.header.frame_id == "map" and goal.behavior_tree == "bt.xml"
    assert (goal.pose.pose.position.x, goal.pose.pose.position.y) == (18.0, 2.0)
    assert (goal.pose.pose.orientation.z, goal.pose.pose.orientation.w) == (0.0, 1.0)
    with pytest.raises(TargetUnknown, match=r"unknown waypoint 'W99' .*W1, W2"):
        resolve_target(command("move_to_waypoint", {"waypoint": "W99"}), LAYOUT)
    with pytest.raises(TargetUnknown, match="no fleet_file"):
        resolve_target(move, None)


def test_dock_robot_goal_takes_the_dock_id_and_a_move_s_sources_are_not_a_dock_s() -> None:
    check_mapping("dock", DOCK, DockRobotGoal(), DockRobotResult())
    dock = command("dock", {"dock": "D2"})
    sources = command_sources(dock, goal_id=GOAL_ID, frame_id="map", target=None)
    goal = build_goal(DockRobotGoal(), DOCK, sources)
    assert (goal.dock_id, goal.use_dock_id, goal.navigate_to_staging_pose) == ("D2", True, True)
    assert goal.max_staging_time == 1000.0
    with pytest.raises(GoalError, match=r"takes \$target.x, which a dock command does not give"):
        build_goal(NavigateToPoseGoal(), NAVIGATE, sources)


def test_a_mapping_that_cannot_fit_its_action_is_refused_at_start() -> None:
    def mapping(**goal: Any) -> ActionMapping:
        return ActionMapping(action_name="x", action_type="p/action/T", goal=goal)

    cases = [
        (mapping(**{"pose.nowhere": 1.0}), "no field 'nowhere'"),
        (mapping(pose="$target.x"), "not a scalar field"),
        (mapping(behavior_tree="$colour"), r"unknown source \$colour"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            check_mapping("move_to_waypoint", bad, NavigateToPoseGoal(), NavigateToPoseResult())
    unknown_result = ActionMapping(
        action_name="x", action_type="p/action/T", result_fields=["num_tries"]
    )
    with pytest.raises(ValueError, match="result field 'num_tries'"):
        check_mapping("dock", unknown_result, DockRobotGoal(), DockRobotResult())
    with pytest.raises(GoalError, match="expected true or false"):
        build_goal(DockRobotGoal(), mapping(use_dock_id=1), {"command_type": "dock"})
    with pytest.raises(ValidationError, match="unknown command types"):
        RosActionParams(actions={"fly": NAVIGATE})
    with pytest.raises(ValidationError, match="action_type"):
        ActionMapping(action_name="x", action_type="nav2_msgs/NavigateToPose")


def test_nav2_outcomes_are_completed_failed_refused_or_interrupted_with_clear_messages() -> None:
    name = "/robot1/navigate_to_pose"

    def outcome(status: int, result: Any, mapping: ActionMapping = NAVIGATE) -> Any:
        return interpret(status, result, mapping, action_name=name, goal_id=GOAL_ID)

    body = outcome(STATUS_SUCCEEDED, NavigateToPoseResult())
    assert body == {"action": name, "goal_id": str(GOAL_ID), "status": "succeeded", "result": {}}
    with pytest.raises(ExecutionFailed) as failed:
        outcome(STATUS_ABORTED, NavigateToPoseResult(208, "no path through the racks"))
    assert failed.value.status_code == 500
    assert "error 208 (planner: no valid path to the goal): no path through the racks" in str(
        failed.value
    )
    with pytest.raises(ExecutionFailed, match="controller: failed to make progress"):
        outcome(STATUS_ABORTED, NavigateToPoseResult(105))
    with pytest.raises(ExecutionFailed, match=r"refused goal .* before acting") as refused:
        outcome(STATUS_ABORTED, NavigateToPoseResult(9001))
    assert refused.value.status_code == 400

    docked = outcome(STATUS_SUCCEEDED, DockRobotResult(num_retries=2), DOCK)
    assert docked["result"] == {"num_retries": 2}
    with pytest.raises(ExecutionFailed, match="no such dock in the docking") as no_dock:
        outcome(STATUS_ABORTED, DockRobotResult(False, 901), DOCK)
    assert no_dock.value.status_code == 400
    with pytest.raises(ExecutionFailed, match="failed to control the robot onto") as control:
        outcome(STATUS_ABORTED, DockRobotResult(False, 905), DOCK)
    assert control.value.status_code == 500
    # Succeeded by its status, failed by its own success flag.
    with pytest.raises(ExecutionFailed, match="charging did not start"):
        outcome(STATUS_SUCCEEDED, DockRobotResult(False, 906), DOCK)

    with pytest.raises(OutcomeUnknown, match=r"does not know goal .* not sent again"):
        outcome(STATUS_UNKNOWN, None)
    with pytest.raises(OutcomeUnknown, match="canceled before it finished"):
        outcome(STATUS_CANCELED, NavigateToPoseResult())


def test_every_documented_nav2_code_has_a_message() -> None:
    for code in (*range(100, 108), *range(200, 209), *range(500, 506), 700, 710, 720, 9000):
        assert code in NAVIGATE_TO_POSE_ERRORS, code
    assert set(range(901, 908)) | {999} <= set(DOCK_ROBOT_ERRORS)
    assert Outcomes().ok_codes == frozenset({0})


def test_nav2_without_nav2_msgs_is_one_clear_start_up_error() -> None:
    class Node:
        context = None

        def has_parameter(self, _name: str) -> bool:
            return False

    class Log:
        def info(self, message: str) -> None: ...
        def warning(self, message: str) -> None: ...
        def error(self, message: str) -> None: ...

    context = BackendContext(robot_id="amr_1", robot_type="amr", logger=Log(), node=Node())
    try:
        import nav2_msgs  # noqa: F401
    except ImportError:
        with pytest.raises(BackendError, match="cannot load action type 'nav2_msgs/action/"):
            make_backend("nav2", {"fleet_file": str(FLEET_FILE)}, context)
    with pytest.raises(BackendError, match=r"backend_params\.frame_id"):
        make_backend("nav2", {"frame_id": ""}, context)
