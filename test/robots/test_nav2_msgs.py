"""The ``nav2`` preset against the real nav2_msgs action types, where Nav2 is installed.

nav2_msgs is not installable where this package is developed (no registry carries it):
these tests skip there. The preset's mapping logic is tested without it in
test_ros_action_mapping.py, on stand-ins with nav2_msgs' field layout.
"""

from __future__ import annotations

import importlib.util
import json
import uuid

import pytest

from fleet_idempotency.commands import parse_payload
from fleet_idempotency.robots.backend import Command
from fleet_idempotency.robots.ros_action.goals import (
    build_goal,
    check_mapping,
    command_sources,
    resolve_target,
)
from fleet_idempotency.robots.ros_action.nav2 import Nav2Params, ros_action_params

from support.paths import FLEET_FILE

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("nav2_msgs") is None,
    reason="nav2_msgs is not installed (no registry carries it here); the nav2 preset's "
    "mapping is tested without it in test_ros_action_mapping.py",
)


def test_the_preset_fits_the_real_nav2_actions() -> None:
    from fleet_idempotency.robots.ros_action.ros_link import load_action_type

    params = ros_action_params(Nav2Params(fleet_file=str(FLEET_FILE)))
    for command_type, payload in (
        ("move_to_waypoint", {"waypoint": "W3"}),
        ("dock", {"dock": "D1"}),
    ):
        mapping = params.actions[command_type]
        action = load_action_type(mapping.action_type)
        check_mapping(command_type, mapping, action.Goal(), action.Result())
        command = Command(
            "amr_1", "k", command_type, parse_payload(command_type, json.dumps(payload))
        )
        from fleet_idempotency.description.fleet import load_fleet

        target = resolve_target(command, load_fleet(FLEET_FILE).world)
        sources = command_sources(command, goal_id=uuid.uuid4(), frame_id="map", target=target)
        build_goal(action.Goal(), mapping, sources)
