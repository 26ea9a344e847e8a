"""Only the orchestrator may command a robot: HMAC-authenticated commands.

The Fast DDS in the Jazzy wheels is built without the DDS Security plugins (see
docs/design.md, "Who may command a robot"), so SROS2 enclaves cannot be used here; the
command itself carries its proof instead.

- ``keyring``: the fleet's master keys (orchestrator) and each robot's derived keys,
  with rotation (add, activate, retire); files written 0600.
- ``signing``: the canonical bytes of a command, its tag, and verification.

No ROS imports.
"""

from .keyring import FleetKeyring, KeyringError, RobotKeyring, WatchedKeyring, derive_robot_key
from .signing import CommandSigner, CommandVerifier, Verdict

__all__ = [
    "CommandSigner",
    "CommandVerifier",
    "FleetKeyring",
    "KeyringError",
    "RobotKeyring",
    "Verdict",
    "WatchedKeyring",
    "derive_robot_key",
]
