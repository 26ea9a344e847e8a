"""Durable idempotency-key store. No ROS imports: usable by agents, tools and tests.

LMDB embedded by default; PostgreSQL (``StoreConfig(url=...)``) for shared replicas.

Typical use on a robot::

    store = IdempotencyStore.open(StoreConfig(path=Path("/var/lib/fleet/agent-1")))
    match store.claim(scope=robot, key=key, robot_id=robot, command_type=t, payload_json=p):
        case Claimed():
            ...execute, then store.finish(...) (or store.release(...) if refused before acting)
        case Replay() as replay:
            ...answer replay.status_code / replay.result_json, flagged replayed
        case InProgress() | Mismatch() | Expired() as answer:
            ...answer answer.status_code / answer.message
"""

from .config import StoreConfig
from .errors import (
    FinalResultConflict,
    InvalidRequest,
    NotClaimed,
    ReadOnlyStore,
    SchemaMismatch,
    StoreClosed,
    StoreCorrupted,
    StoreError,
    StoreFull,
    StoreUnavailable,
    UnknownKey,
)
from .fingerprint import canonical_json, command_fingerprint
from .idempotency import INTERRUPTED_STATUS_CODE, IdempotencyStore
from .keys import validate_key, validate_scope
from .outcomes import (
    Claimed,
    ClaimOutcome,
    Expired,
    GcReport,
    InProgress,
    Mismatch,
    RecoveryReport,
    Replay,
)
from .owner import current_owner, is_alive
from .records import Record, State, Tombstone
from .requests import ClaimRequest

__all__ = [
    "INTERRUPTED_STATUS_CODE",
    "ClaimOutcome",
    "ClaimRequest",
    "Claimed",
    "Expired",
    "FinalResultConflict",
    "GcReport",
    "IdempotencyStore",
    "InProgress",
    "InvalidRequest",
    "Mismatch",
    "NotClaimed",
    "ReadOnlyStore",
    "Record",
    "RecoveryReport",
    "Replay",
    "SchemaMismatch",
    "State",
    "StoreClosed",
    "StoreConfig",
    "StoreCorrupted",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "Tombstone",
    "UnknownKey",
    "canonical_json",
    "command_fingerprint",
    "current_owner",
    "is_alive",
    "validate_key",
    "validate_scope",
]
