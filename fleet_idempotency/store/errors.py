"""Exceptions raised by the idempotency store.

Each carries an HTTP-like ``status_code`` so that the ROS layer can answer a client without
a lookup table of its own, and a message written for the operator who reads the log.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""

    status_code: int = 500


class InvalidRequest(StoreError):
    """The caller sent something the store refuses to record (nothing was stored)."""

    status_code = 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"invalid {field}: {message}")
        self.field = field
        self.reason = message


class StoreFull(StoreError):
    """New claims are refused because the store reached its capacity limit.

    Everything already stored is intact, and finish/release/GC keep working inside the
    reserved headroom, so running GC (or raising ``map_size_max``) is the way out.
    """

    status_code = 507


class StoreCorrupted(StoreError):
    """The store directory holds something that is not a readable idempotency store."""

    status_code = 500


class SchemaMismatch(StoreError):
    """The store was written by a schema version this code does not understand."""

    status_code = 500


class StoreClosed(StoreError):
    """The store was used after ``close()``."""

    status_code = 503


class StoreUnavailable(StoreError):
    """The database behind the store cannot be reached (or stayed too busy to commit).

    Retryable: the store reconnects by itself once the database answers again.
    """

    status_code = 503


class ReadOnlyStore(StoreError):
    """A write was attempted on a store opened read-only (e.g. by the operator CLI)."""

    status_code = 405


class UnknownKey(StoreError):
    """finish/advance/release named a key that has no record in this scope."""

    status_code = 404

    def __init__(self, scope: str, key: str) -> None:
        super().__init__(f"no record for key {key!r} in scope {scope!r}")
        self.scope = scope
        self.key = key


class NotClaimed(StoreError):
    """The key exists but is not in the state the operation requires.

    Raised e.g. when releasing a key whose result is already final: a final record is never
    removed by a release, because a retry would then run the command a second time.
    """

    status_code = 409

    def __init__(self, scope: str, key: str, message: str) -> None:
        super().__init__(message)
        self.scope = scope
        self.key = key


class FinalResultConflict(StoreError):
    """finish() was called again on a final record with a different result."""

    status_code = 409
