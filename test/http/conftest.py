"""Fixtures of the HTTP API tests: a real http_api process in front of a real fleet."""

from __future__ import annotations

import pytest

from support.fleet_harness import FleetHarness
from support.http_harness import HttpServer


@pytest.fixture
def http_server(fleet: FleetHarness) -> HttpServer:
    return HttpServer(fleet)
