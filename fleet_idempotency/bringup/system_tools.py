"""Programs a bring-up takes from the machine, not the venv, and one clear line when one is
missing.

The fleet's own processes come from the venv; a broker, a database server, a browser or a
debugger come from Debian packages, which ``scripts/setup.sh`` installs from
``env/debian-packages.txt``. A command that needs one of them looks for it before it starts
anything, so a missing package is one line naming the package and how to install it, never a
traceback half-way through a start.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

# Debian installs servers in sbin, which an unprivileged PATH often lacks.
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")


class MissingSystemTool(RuntimeError):
    """A program from a Debian package is not installed here."""

    def __init__(self, tool: SystemTool) -> None:
        self.tool = tool
        super().__init__(
            f"{tool.binary} ({tool.needed_for}) is not installed: install the Debian package "
            f"{tool.debian_package} (sudo apt-get install {tool.debian_package}; "
            f"scripts/setup.sh does it when run as root)"
        )


@dataclass(frozen=True)
class SystemTool:
    binary: str
    debian_package: str
    needed_for: str
    # Version-numbered folders outside every PATH (PostgreSQL's /usr/lib/postgresql/15/bin).
    folder_patterns: tuple[str, ...] = ()

    def find(self) -> Path:
        """The program's path; :class:`MissingSystemTool` when it is not installed."""
        for pattern in self.folder_patterns:
            for folder in sorted(glob.glob(pattern), reverse=True):  # newest version first
                candidate = Path(folder) / self.binary
                if os.access(candidate, os.X_OK):
                    return candidate
        search_path = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
        found = shutil.which(self.binary, path=search_path)
        if found is None:
            raise MissingSystemTool(self)
        return Path(found)

    def available(self) -> bool:
        try:
            self.find()
        except MissingSystemTool:
            return False
        return True


MOSQUITTO = SystemTool("mosquitto", "mosquitto", "the MQTT broker of VDA 5050 vehicles")
MOSQUITTO_PASSWD = SystemTool("mosquitto_passwd", "mosquitto", "the MQTT broker's password tool")
POSTGRES = SystemTool(
    "postgres",
    "postgresql",
    "the database orchestrator replicas share",
    folder_patterns=("/usr/lib/postgresql/*/bin",),
)
CHROMIUM = SystemTool("chromium", "chromium", "the headless browser of the fleet page's test")
OPENSSL = SystemTool("openssl", "openssl", "the throwaway certificates of a TLS test broker")
GDB = SystemTool("gdb", "gdb", "the debugger that forces Fast DDS's teardown deadlock")


def ensure_installed(tools: list[SystemTool]) -> None:
    """Raise :class:`MissingSystemTool` for the first of ``tools`` that is not installed."""
    for tool in tools:
        tool.find()
