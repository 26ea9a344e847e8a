"""The ``nav2`` preset of the ``ros_action`` backend: a Nav2 robot, one goal per key.

- ``move_to_waypoint`` -> ``nav2_msgs/action/NavigateToPose``: the waypoint resolved to a
  pose from the fleet file's layout (or the payload's x/y), in ``frame_id``; heading 0.
- ``dock`` -> ``nav2_msgs/action/DockRobot`` (opennav_docking): ``dock_id`` from the payload.

Nav2's error codes become clear messages: NavigateToPose reports the code of the
behaviour-tree node that failed (the planner's 2xx, the controller's 1xx, the smoother's
5xx, the behaviours' 7xx; bt_navigator's ``error_code_names``) or its own 9xxx;
DockRobot its 901-999. A code the server raises before anything moves is a refusal
(FAILED with 400: the goal was sent, the key is spent). The tables below are written
against nav2_msgs' definitions (Jazzy and later; codes absent from a release are simply
never reported).

``nav2_msgs`` cannot be installed where this package is developed: this module is
configuration and mapping only, tested here; the action types are loaded when an agent
starts, where Nav2 is installed.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fleet_idempotency.commands import DOCK, MOVE_TO_WAYPOINT
from fleet_idempotency.robots.backend import BackendContext

from .backend import RosActionBackend
from .config import ActionMapping, Outcomes, RosActionParams

NAVIGATE_TO_POSE = "nav2_msgs/action/NavigateToPose"
DOCK_ROBOT = "nav2_msgs/action/DockRobot"

# Codes NavigateToPose may report: its own, and those of the behaviour-tree nodes it
# runs, which bt_navigator passes on (the first failing node's, by priority).
NAVIGATE_TO_POSE_ERRORS: dict[int, str] = {
    1: "goal rejected by a behaviour-tree node's server",
    2: "a behaviour-tree node could not send its goal",
    # FollowPath (controller server)
    100: "controller: unknown error",
    101: "controller: no such controller plugin",
    102: "controller: transform (TF) error",
    103: "controller: the path is invalid",
    104: "controller: patience exceeded (no progress allowed for too long)",
    105: "controller: failed to make progress",
    106: "controller: no valid velocity command",
    107: "controller: timed out",
    108: "controller: action timed out",
    # ComputePathToPose (planner server)
    200: "planner: unknown error",
    201: "planner: no such planner plugin",
    202: "planner: transform (TF) error",
    203: "planner: the robot is outside the map",
    204: "planner: the goal is outside the map",
    205: "planner: the robot's start is occupied",
    206: "planner: the goal is occupied",
    207: "planner: timed out",
    208: "planner: no valid path to the goal",
    # ComputePathThroughPoses
    300: "planner (through poses): unknown error",
    301: "planner (through poses): no such planner plugin",
    302: "planner (through poses): transform (TF) error",
    303: "planner (through poses): the robot is outside the map",
    304: "planner (through poses): a goal is outside the map",
    305: "planner (through poses): the robot's start is occupied",
    306: "planner (through poses): a goal is occupied",
    307: "planner (through poses): timed out",
    308: "planner (through poses): no valid path",
    309: "planner (through poses): no via-points given",
    # SmoothPath (smoother server)
    500: "smoother: unknown error",
    501: "smoother: no such smoother plugin",
    502: "smoother: timed out",
    503: "smoother: the smoothed path is in collision",
    504: "smoother: failed to smooth the path",
    505: "smoother: the path is invalid",
    # Behaviours (recoveries)
    700: "spin: unknown error",
    701: "spin: timed out",
    702: "spin: transform (TF) error",
    703: "spin: collision ahead",
    710: "back-up: unknown error",
    711: "back-up: timed out",
    712: "back-up: transform (TF) error",
    713: "back-up: invalid input",
    714: "back-up: collision ahead",
    720: "drive-on-heading: unknown error",
    721: "drive-on-heading: timed out",
    722: "drive-on-heading: transform (TF) error",
    723: "drive-on-heading: collision ahead",
    724: "drive-on-heading: invalid input",
    730: "assisted teleop: unknown error",
    731: "assisted teleop: timed out",
    732: "assisted teleop: transform (TF) error",
    740: "wait: unknown error",
    741: "wait: timed out",
    # NavigateToPose itself (bt_navigator)
    9000: "navigator: unknown error",
    9001: "navigator: failed to load the behaviour tree",
    9002: "navigator: transform (TF) error",
    9003: "navigator: timed out",
}
# Raised before the robot moves: the navigator could not even load its tree.
NAVIGATE_TO_POSE_REFUSED = frozenset({9001})

DOCK_ROBOT_ERRORS: dict[int, str] = {
    1: "goal rejected by the docking server's navigator",
    2: "the docking server could not send its navigation goal",
    901: "no such dock in the docking server's database",
    902: "the dock is not valid (unknown dock type or plugin)",
    903: "failed to reach the dock's staging pose",
    904: "failed to detect the dock",
    905: "failed to control the robot onto the dock",
    906: "docked, but charging did not start",
    907: "docking timed out",
    999: "docking: unknown error",
}
# The dock is looked up before anything moves.
DOCK_ROBOT_REFUSED = frozenset({901, 902})


class Nav2Params(BaseModel):
    """Parameters of the ``nav2`` backend: the ``ros_action`` backend's, with the two
    actions preset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Nav2's namespace (multi-robot set-ups: "/robot1"); the action names in it.
    namespace: str = Field(default="", pattern=r"^(/[A-Za-z][A-Za-z0-9_]*)*$")
    navigate_action: str = "navigate_to_pose"
    dock_action: str = "dock_robot"
    # The fleet file whose waypoints are the navigation goals, and their frame.
    fleet_file: str = ""
    frame_id: str = Field(default="map", min_length=1)
    # Empty: bt_navigator's default behaviour tree.
    behavior_tree: str = ""
    navigate_to_staging_pose: bool = True
    max_staging_time_s: float = Field(default=1000.0, gt=0, allow_inf_nan=False)
    accept_timeout_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    result_poll_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    cancel_timeout_s: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    navigate_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    dock_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)


def navigate_to_pose_mapping(params: Nav2Params) -> ActionMapping:
    goal: dict[str, Any] = {
        "pose.header.frame_id": "$frame_id",
        "pose.pose.position.x": "$target.x",
        "pose.pose.position.y": "$target.y",
        "pose.pose.orientation.z": "$target.qz",
        "pose.pose.orientation.w": "$target.qw",
    }
    if params.behavior_tree:
        goal["behavior_tree"] = params.behavior_tree
    return ActionMapping(
        action_name=params.navigate_action,
        action_type=NAVIGATE_TO_POSE,
        goal=goal,
        outcomes=Outcomes(
            error_code_field="error_code",
            error_message_field="error_msg",
            error_codes=NAVIGATE_TO_POSE_ERRORS,
            refused_codes=NAVIGATE_TO_POSE_REFUSED,
        ),
        timeout_s=params.navigate_timeout_s,
    )


def dock_robot_mapping(params: Nav2Params) -> ActionMapping:
    return ActionMapping(
        action_name=params.dock_action,
        action_type=DOCK_ROBOT,
        goal={
            "use_dock_id": True,
            "dock_id": "$payload.dock",
            "navigate_to_staging_pose": params.navigate_to_staging_pose,
            "max_staging_time": params.max_staging_time_s,
        },
        outcomes=Outcomes(
            success_field="success",
            error_code_field="error_code",
            error_message_field="error_msg",
            error_codes=DOCK_ROBOT_ERRORS,
            refused_codes=DOCK_ROBOT_REFUSED,
        ),
        result_fields=["num_retries"],
        timeout_s=params.dock_timeout_s,
    )


def ros_action_params(params: Nav2Params) -> RosActionParams:
    """The ``ros_action`` parameters the preset stands for."""
    return RosActionParams(
        actions={
            MOVE_TO_WAYPOINT: navigate_to_pose_mapping(params),
            DOCK: dock_robot_mapping(params),
        },
        namespace=params.namespace,
        fleet_file=params.fleet_file,
        frame_id=params.frame_id,
        accept_timeout_s=params.accept_timeout_s,
        result_poll_s=params.result_poll_s,
        cancel_timeout_s=params.cancel_timeout_s,
    )


class Nav2Backend(RosActionBackend):
    """A Nav2 robot (backend ``nav2``): the ``ros_action`` backend with Nav2's actions."""

    interface_version = 1
    Params: ClassVar[type[BaseModel]] = Nav2Params

    def __init__(self, context: BackendContext, params: BaseModel) -> None:
        assert isinstance(params, Nav2Params)
        super().__init__(context, ros_action_params(params))
