"""Finding, checking and building robot backends (robots/registry.py), and what backends
of one process share (robots/shared.py). Plain Python: no agent, no ROS."""

from __future__ import annotations

from typing import Any

import pytest

from fleet_idempotency.robots.backend import BackendContext
from fleet_idempotency.robots.registry import (
    ENTRY_POINT_GROUP,
    BackendError,
    available_backends,
    load_backend_class,
    make_backend,
)
from fleet_idempotency.robots.shared import SharedResources
from fleet_idempotency.robots.world_backends import GazeboBackend, SimulatedBackend


class Log:
    def info(self, message: str) -> None: ...
    def warning(self, message: str) -> None: ...
    def error(self, message: str) -> None: ...


def context(robot_type: str = "conveyor") -> BackendContext:
    return BackendContext(robot_id="c1", robot_type=robot_type, logger=Log())


def test_the_package_backends_register_through_entry_points() -> None:
    installed = available_backends()
    assert installed["simulated"].group == ENTRY_POINT_GROUP
    assert load_backend_class("simulated") is SimulatedBackend
    assert load_backend_class("gazebo") is GazeboBackend


def test_module_class_names_code_that_is_not_installed() -> None:
    backend = make_backend(
        "support.backends.samples:Sample",
        {"serial": "SN-7", "stations": '["S1", "S2"]', "speed_m_s": "2.5"},
        context(),
    )
    # Values as ROS parameters carry them: structured ones as JSON, numbers as text.
    assert backend.params.model_dump() == {
        "serial": "SN-7",
        "stations": ["S1", "S2"],
        "speed_m_s": 2.5,
    }
    assert backend.robot_id == "c1" and backend.readiness().ready


@pytest.mark.parametrize(
    ("name", "params", "robot_type", "message"),
    [
        (
            "nonexistent",
            {},
            "conveyor",
            "backend 'nonexistent' not found: no entry point of that name in group "
            f"'{ENTRY_POINT_GROUP}' (installed: ",
        ),
        ("", {}, "conveyor", "no backend named"),
        (
            "support.backends.broken:Anything",
            {},
            "conveyor",
            "backend 'support.backends.broken:Anything': cannot import "
            "'support.backends.broken': ModuleNotFoundError",
        ),
        (
            "support.backends.samples:Missing",
            {},
            "conveyor",
            "module 'support.backends.samples' has no 'Missing'",
        ),
        ("support.backends.samples:NotABackend", {}, "conveyor", "not a subclass of"),
        (
            "support.backends.samples:FromTheFuture",
            {"serial": "x"},
            "conveyor",
            "was built for backend interface version 99; this agent implements version(s) [1]",
        ),
        (
            "support.backends.samples:Unversioned",
            {},
            "conveyor",
            "does not declare interface_version",
        ),
        (
            "support.backends.samples:Sample",
            {"speed_m_s": -1, "colour": "red"},
            "conveyor",
            "invalid parameters: backend_params.speed_m_s: Input should be greater than 0; "
            "backend_params.serial: Field required; backend_params.colour: Extra inputs",
        ),
        (
            "support.backends.samples:Sample",
            {"serial": "x"},
            "forklift",
            "drives robot types ['conveyor'], not 'forklift'",
        ),
        (
            "support.backends.samples:RefusesToStart",
            {"serial": "x"},
            "conveyor",
            "refused to start: serial number unknown to the controller",
        ),
        ("simulated", {"time_scale": 1.0}, "submarine", "drives robot types"),
    ],
)
def test_each_way_a_backend_can_be_wrong_is_one_clear_error(
    name: str, params: dict[str, Any], robot_type: str, message: str
) -> None:
    with pytest.raises(BackendError) as raised:
        make_backend(name, params, context(robot_type))
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_simulated_backend_needs_a_node() -> None:
    with pytest.raises(BackendError, match="needs a node"):
        make_backend("simulated", {}, context("amr"))


def test_shared_resources_open_once_and_close_after_the_last_user() -> None:
    shared = SharedResources()
    opened: list[str] = []
    closed: list[str] = []

    def open_link() -> str:
        opened.append("link")
        return "link"

    assert shared.acquire("world", open_link, closed.append) == "link"
    assert shared.acquire("world", open_link, closed.append) == "link"
    assert opened == ["link"] and shared.users("world") == 2
    shared.release("world")
    assert closed == []
    shared.release("world")
    assert closed == ["link"] and shared.users("world") == 0
    shared.release("world")  # a release too many is harmless
    shared.acquire("world", open_link, closed.append)
    shared.close_all()
    assert closed == ["link", "link"]
