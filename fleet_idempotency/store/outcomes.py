"""Explicit answers of ``claim`` and reports of maintenance runs.

A claim has five possible answers and each needs different handling by the caller, so
they are distinct types (match on them) instead of a boolean plus flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .records import Record, Tombstone


@dataclass(frozen=True, slots=True)
class Claimed:
    """The key was new: the caller owns it and must now execute, then finish or release."""

    record: Record
    replayed: bool = False

    @property
    def status_code(self) -> int:
        return 202

    @property
    def message(self) -> str:
        return f"key {self.record.key!r} claimed; execute it, then record the result"


@dataclass(frozen=True, slots=True)
class Replay:
    """Duplicate of a finished command: answer with the cached code and body, do not run."""

    record: Record
    replayed: bool = True

    @property
    def status_code(self) -> int:
        return self.record.status_code

    @property
    def result_json(self) -> str:
        return self.record.result_json

    @property
    def message(self) -> str:
        return (
            f"key {self.record.key!r} already {self.record.state.name}; "
            "cached result replayed, command not executed again"
        )


@dataclass(frozen=True, slots=True)
class InProgress:
    """Duplicate of a command still running: wait for its result, do not resend work."""

    record: Record
    replayed: bool = False

    @property
    def status_code(self) -> int:
        return 409

    @property
    def message(self) -> str:
        return (
            f"key {self.record.key!r} is {self.record.state.name}; wait for its result "
            "or use the status check"
        )


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The key was used before for a different command; the stored record is untouched."""

    record: Record
    received_fingerprint: str
    replayed: bool = False

    @property
    def status_code(self) -> int:
        return 422

    @property
    def message(self) -> str:
        return (
            f"key {self.record.key!r} was already used for a different command: stored "
            f"fingerprint {self.record.fingerprint}, received fingerprint "
            f"{self.received_fingerprint}; use a new key for a new command"
        )


@dataclass(frozen=True, slots=True)
class Expired:
    """The key's retention window is over; only a tombstone remains."""

    tombstone: Tombstone
    replayed: bool = False

    @property
    def status_code(self) -> int:
        return 410

    @property
    def message(self) -> str:
        return (
            f"key {self.tombstone.key!r} expired — use the status check; it ended "
            f"{self.tombstone.state.name} with status {self.tombstone.status_code}"
        )


ClaimOutcome = Claimed | Replay | InProgress | Mismatch | Expired


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """In-flight records of dead owners found at open (or by an explicit ``recover()``)."""

    # Re-owned by this process: the caller must re-run them, then finish.
    resumed: list[Record] = field(default_factory=list)
    # Marked INTERRUPTED (final, cached): they need reconciliation by an operator/client.
    interrupted: list[Record] = field(default_factory=list)
    # Re-owned by this process under the ``reconcile`` policy: the caller must find out
    # from the robot what became of them (never re-run them), then finish.
    reconciling: list[Record] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GcReport:
    records_purged: int = 0
    tombstones_written: int = 0
    tombstones_purged: int = 0
    # In-flight records past their expiry are never purged; their expiry is pushed forward.
    in_flight_deferred: int = 0
    batches: int = 0
    # True when the run stopped because nothing expired remains (not because of max_batches).
    complete: bool = True

    def __add__(self, other: GcReport) -> GcReport:
        return GcReport(
            records_purged=self.records_purged + other.records_purged,
            tombstones_written=self.tombstones_written + other.tombstones_written,
            tombstones_purged=self.tombstones_purged + other.tombstones_purged,
            in_flight_deferred=self.in_flight_deferred + other.in_flight_deferred,
            batches=self.batches + other.batches,
            complete=other.complete,
        )
