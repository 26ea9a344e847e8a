"""The node executables (``agent_driver``, ``orchestrator``, ...): stop signals first.

Loading a node's module (rclpy, the generated interfaces, pydantic, FastAPI) takes ~0.5 s,
more on a loaded machine. Each entry point routes SIGINT/SIGTERM (``stop_signals``,
stdlib only) before that import, so a Ctrl-C during start-up is a clean stop and not
a KeyboardInterrupt traceback; one that came during the import ends the process there,
exit 0. No rclpy import here.
"""

from __future__ import annotations

import importlib

from fleet_idempotency.ros import stop_signals


def _run(module: str) -> None:
    stops = stop_signals.install()
    main = importlib.import_module(module).main
    if not stops.received.is_set():
        main()


def agent_driver() -> None:
    _run("fleet_idempotency.agent.node")


def agent_host() -> None:
    _run("fleet_idempotency.agent.host")


def orchestrator() -> None:
    _run("fleet_idempotency.orchestrator.node")


def world_simulator() -> None:
    _run("fleet_idempotency.sim.world_node")


def http_api() -> None:
    _run("fleet_idempotency.http.node")
