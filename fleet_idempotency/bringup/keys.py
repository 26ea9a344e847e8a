"""The fleet's keyrings on disk: one fleet keyring, one derived keyring per robot.

``fleet-idem up``/``demo`` provision them in the store directory on first start, so a
fleet they bring up is authenticated by default; ``fleet-idem keys`` rotates them. The
directory layout is what the launch files' ``keyring_dir`` argument points at::

    <dir>/fleet.json        master keys and the active key id (orchestrator only)
    <dir>/<robot_id>.json   that robot's derived keys (copy onto the robot)

No ROS imports.
"""

from __future__ import annotations

from pathlib import Path

from fleet_idempotency.auth import FleetKeyring
from fleet_idempotency.description.fleet import FleetConfig

FLEET_KEYRING = "fleet.json"


def fleet_keyring_path(directory: Path) -> Path:
    return directory / FLEET_KEYRING


def robot_keyring_path(directory: Path, robot_id: str) -> Path:
    return directory / f"{robot_id}.json"


def export_robot_keyrings(fleet: FleetConfig, directory: Path, keyring: FleetKeyring) -> None:
    for robot in fleet.robots:
        keyring.for_robot(robot.id).save(robot_keyring_path(directory, robot.id))


def provision(fleet: FleetConfig, directory: Path) -> FleetKeyring:
    """The fleet keyring in ``directory`` (generated if absent), robot keyrings written."""
    path = fleet_keyring_path(directory)
    if path.exists():
        keyring = FleetKeyring.load(path)
    else:
        keyring = FleetKeyring.generate()
        keyring.save(path)
    export_robot_keyrings(fleet, directory, keyring)
    return keyring


def update(fleet: FleetConfig, directory: Path, keyring: FleetKeyring) -> None:
    """Robots first, then the fleet keyring: no command is ever signed with a key that a
    robot does not hold yet (nodes re-read their keyring files when they change)."""
    export_robot_keyrings(fleet, directory, keyring)
    keyring.save(fleet_keyring_path(directory))
