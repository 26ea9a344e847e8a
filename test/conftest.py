"""Shared fixtures: each ROS test gets its own DDS domain and rclpy context.

rclpy is imported inside the fixtures, so ROS-free tests (the store) run without it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from fleet_idempotency.http.ports import PortLease
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


# Session fixtures too costly to build on every parallel worker (a colcon build: ~1 min).
BUILT_ONCE = frozenset({"colcon_workspace"})


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """For parallel runs (scripts/test.sh: pytest-xdist, ``--dist loadgroup``): tests that
    share a module-scoped fixture, or a session build, go to one worker, which builds it
    once; long tests go first, so that no worker is left with one at the end."""
    for item in items:
        fixture_defs = getattr(item, "_fixtureinfo", None)
        if fixture_defs is None:
            continue
        shared = sorted(BUILT_ONCE.intersection(item.fixturenames))
        if not shared and any(
            definition.scope in ("module", "class", "package")
            for definitions in fixture_defs.name2fixturedefs.values()
            for definition in definitions
        ):
            shared = [item.nodeid.split("::", 1)[0]]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable


@pytest.fixture
def ros_domain() -> Iterator[int]:
    """A DDS domain id no other test or concurrent run is using."""
    with lease_domain_id() as domain_id:
        yield domain_id


@pytest.fixture
def free_port() -> Iterator[int]:
    """A localhost TCP port for a server this test starts, leased from every other test and
    run of this package (parallel workers) until the test ends."""
    with PortLease("127.0.0.1") as lease:
        yield lease.port


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
