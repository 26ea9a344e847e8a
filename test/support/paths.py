"""Where the repository's own files are, for tests that read them (never for imports)."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
REPO = SUPPORT.parents[1]
FLEET_FILE = REPO / "config" / "fleet.yaml"
