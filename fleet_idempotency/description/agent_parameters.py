"""A robot's entry in the fleet file -> its agent driver's node parameters.

One mapping for every way an agent starts (``ros2 launch``, ``fleet-idem``, ``agent_host``),
so that an agent gets the same parameters whichever starts it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from fleet_idempotency.description.fleet import FleetConfig, RobotSpec

ParameterValue = str | int | float | bool
# Backends that run in simulated time: the fleet file's simulation.time_scale is theirs
# unless the robot's backend_params say otherwise.
SIMULATED_BACKENDS: Final = frozenset({"simulated", "gazebo"})
# Backends that find named targets (waypoints, docks, slots) on the fleet's map through a
# ``fleet_file`` parameter: it is the fleet file's own unless backend_params give one (or
# an inline ``layout``).
LAYOUT_BACKENDS: Final = frozenset({"vda5050"})


def agent_namespace(robot_id: str) -> str:
    """Where a robot's agent lives: its topics are ``<namespace>/commands``, ``status``..."""
    return f"/fleet/{robot_id}"


def agent_parameters(
    fleet: FleetConfig,
    robot: RobotSpec,
    *,
    store_dir: Path,
    time_scale: float | None = None,
    robot_index: int = 0,
    keyring_dir: Path | None = None,
    fleet_file: Path | None = None,
) -> dict[str, ParameterValue]:
    """``fleet_file``: where ``fleet`` was read from (for backends in LAYOUT_BACKENDS)."""
    retention = fleet.retention
    parameters: dict[str, ParameterValue] = {
        "robot_id": robot.id,
        "robot_type": robot.type,
        "backend": robot.backend,
        "start_x": robot.start.x,
        "start_y": robot.start.y,
        "start_theta": robot.start.theta,
        "capacity": robot.capacity,
        "store_dir": str(store_dir / "robots"),
        "retention_s": retention.retention_s,
        "tombstone_retention_s": retention.tombstone_retention_s,
        "expired_key_policy": retention.expired_key_policy,
        "result_drop_probability": fleet.faults.result_drop_probability,
        # Distinct per robot, reproducible per fleet file; 0 keeps "random".
        "seed": fleet.faults.seed + robot_index if fleet.faults.seed else 0,
    }
    backend_params = dict(robot.backend_params)
    if robot.backend in SIMULATED_BACKENDS and "time_scale" not in backend_params:
        backend_params["time_scale"] = (
            fleet.simulation.time_scale if time_scale is None else time_scale
        )
    if (
        robot.backend in LAYOUT_BACKENDS
        and fleet_file is not None
        and not {"fleet_file", "layout"} & backend_params.keys()
    ):
        backend_params["fleet_file"] = str(Path(fleet_file).resolve())
    for name, value in backend_params.items():
        if value is None:
            continue  # the backend's default
        # ROS parameters carry scalars and flat lists of one type: anything structured
        # travels as JSON, which the agent decodes for the backend (robots/registry.py).
        parameters[f"backend_params.{name}"] = (
            value if isinstance(value, str | int | float | bool) else json.dumps(value)
        )
    if keyring_dir is not None:
        parameters["auth_keyring"] = str(keyring_dir / f"{robot.id}.json")
    for command_type, seconds in retention.retention_s_by_type.items():
        parameters[f"retention_s_by_type.{command_type}"] = seconds
    for command_type, policy in retention.recovery_policy_by_type.items():
        parameters[f"recovery_policy_by_type.{command_type}"] = policy
    return parameters
