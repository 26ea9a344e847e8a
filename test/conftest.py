"""Shared fixtures: each ROS test gets its own DDS domain and rclpy context.

rclpy is imported inside the fixtures, so ROS-free tests (the store) run without it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from fleet_idempotency.ros.dds_isolation import isolated_environment, lease_domain_id

if TYPE_CHECKING:
    import rclpy.context

pytest_plugins = [
    "support.ros_support",
    "support.fleet_harness",
    "support.http_harness",
    "support.postgres_support",
    "support.event_log_support",
    "support.colcon_workspace",
]


def pytest_configure(config: pytest.Config) -> None:
    # In-process nodes read discovery settings from the environment at creation time.
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.pop("ROS_LOCALHOST_ONLY", None)


@pytest.fixture
def ros_domain() -> Iterator[int]:
    """A DDS domain id no other test or concurrent run is using."""
    with lease_domain_id() as domain_id:
        yield domain_id


@pytest.fixture
def ros_env(ros_domain: int) -> dict[str, str]:
    """Environment for child processes that must join this test's domain."""
    return isolated_environment(ros_domain)


@pytest.fixture
def ros_context(ros_domain: int) -> Iterator[rclpy.context.Context]:
    """An initialised rclpy context bound to this test's domain."""
    import rclpy

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=ros_domain)
    try:
        yield context
    finally:
        context.try_shutdown()
