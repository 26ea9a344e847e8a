"""The orchestrator's append-only event log (event sourcing). No ROS imports.

Every state change of a command is an immutable ``FleetEventRecord`` with a gap-free
sequence number; its identity (client, key, event type, discriminator) makes appends
idempotent, and ``replay`` folds the log back into the fleet state::

    with LmdbEventLog(EventLogConfig(path=Path("/var/lib/fleet/events"))) as log:
        stored, appended = log.append(event)
        state = replay(log.read())
"""

from .base import EventLog
from .config import EventLogConfig
from .lmdb_log import LmdbEventLog
from .model import (
    EventLogClosed,
    EventLogCorrupted,
    EventLogError,
    EventLogFull,
    EventLogReadOnly,
    EventLogSchemaMismatch,
    EventType,
    FleetEventRecord,
    Identity,
)
from .replay import FleetState, KeyView, replay

__all__ = [
    "EventLog",
    "EventLogClosed",
    "EventLogConfig",
    "EventLogCorrupted",
    "EventLogError",
    "EventLogFull",
    "EventLogReadOnly",
    "EventLogSchemaMismatch",
    "EventType",
    "FleetEventRecord",
    "FleetState",
    "Identity",
    "KeyView",
    "LmdbEventLog",
    "replay",
]
