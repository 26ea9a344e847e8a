"""The orchestrator's append-only event log (event sourcing). No ROS imports.

Every state change of a command is an immutable ``FleetEventRecord`` with a gap-free
sequence number; its identity (client, key, event type, discriminator) makes appends
idempotent, and ``replay`` folds the log back into the fleet state::

    with open_event_log(EventLogConfig(path=Path("/var/lib/fleet/events"))) as log:
        stored, appended = log.append(event)
        state = replay(log.read())

``EventLogConfig(url="postgresql://...")`` opens the same log in PostgreSQL instead
(``postgres_log.PostgresEventLog``, imported on demand), shared by orchestrator replicas.
"""

from .base import EventLog
from .config import EventLogConfig
from .factory import open_event_log
from .lmdb_log import LmdbEventLog
from .model import (
    EventLogClosed,
    EventLogCorrupted,
    EventLogError,
    EventLogFull,
    EventLogReadOnly,
    EventLogSchemaMismatch,
    EventLogUnavailable,
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
    "EventLogUnavailable",
    "EventType",
    "FleetEventRecord",
    "FleetState",
    "Identity",
    "KeyView",
    "LmdbEventLog",
    "open_event_log",
    "replay",
]
