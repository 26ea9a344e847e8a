"""Public entry point of the event log; the implementation is the ``events`` package.

Kept as one flat module name so the orchestrator and tools import from a single place
whatever the package layout becomes.
"""

from .events import (
    EventLog,
    EventLogClosed,
    EventLogConfig,
    EventLogCorrupted,
    EventLogError,
    EventLogFull,
    EventLogReadOnly,
    EventLogSchemaMismatch,
    EventType,
    FleetEventRecord,
    FleetState,
    Identity,
    KeyView,
    LmdbEventLog,
    replay,
)

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
