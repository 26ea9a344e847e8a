"""Where the package's installed data (config/, launch/) lives."""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = "fleet_idempotency"


def share_dir() -> Path:
    """``share/fleet_idempotency``: through the ament index (colcon, apt), else the venv."""
    try:
        from ament_index_python.packages import get_package_share_directory  # noqa: PLC0415

        return Path(get_package_share_directory(PACKAGE))
    # OSError: AMENT_PREFIX_PATH unset, as in a plain venv.
    except (ImportError, LookupError, ValueError, OSError):
        return Path(sys.prefix) / "share" / PACKAGE


def default_fleet_file() -> Path:
    return share_dir() / "config" / "fleet.yaml"


def default_demo_fleet_file() -> Path:
    """``fleet-idem demo``'s fleet: the default one with two robots as VDA 5050 vehicles."""
    return share_dir() / "config" / "fleet_mixed.yaml"
