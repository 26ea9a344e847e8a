"""Model-based test: the store against a plain in-memory reference of the semantics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from fleet_idempotency.store import (
    Claimed,
    Expired,
    IdempotencyStore,
    InProgress,
    Mismatch,
    NotClaimed,
    Record,
    Replay,
    State,
    StoreConfig,
    Tombstone,
    UnknownKey,
    command_fingerprint,
)

from support.store_support import FakeClock, Location, is_postgres

RETENTION = 100.0
TOMBSTONE_RETENTION = 300.0
SCOPES = st.sampled_from(["amr-1", "arm-2"])
KEYS = st.sampled_from(["k1", "k2", "k3"])
TYPES = st.sampled_from(["pick", "move_to_waypoint"])
SLOTS = st.sampled_from(["A1", "B2"])


@dataclass(frozen=True)
class ModelRecord:
    fingerprint: str
    command_type: str
    state: State
    status_code: int
    result_json: str
    expires_at: float  # only meaningful once final


@dataclass(frozen=True)
class ModelTombstone:
    state: State
    status_code: int
    until: float


class StoreMachine(RuleBasedStateMachine):
    def __init__(self, new_config: Callable[..., StoreConfig], policy: str) -> None:
        super().__init__()
        self.policy = policy
        self.clock = FakeClock()
        # Each example starts from an empty store of its own.
        self.config = new_config(
            default_retention_s=RETENTION,
            tombstone_retention_s=TOMBSTONE_RETENTION,
            expired_key_policy=self.policy,
            durable=False,
            gc_batch_size=2,
        )
        self.generation = 0
        self.dead_owners: set[str] = set()
        self.store = self._open()
        self.records: dict[tuple[str, str], ModelRecord] = {}
        self.tombstones: dict[tuple[str, str], ModelTombstone] = {}

    def _open(self, *, new_process: bool = True) -> IdempotencyStore:
        # A clean reopen is the same process (same owner); a crash restart is a new one.
        if new_process:
            self.generation += 1
        return IdempotencyStore.open(
            self.config,
            clock=self.clock,
            owner=f"model/{self.generation}/1",
            owner_alive=lambda owner: owner not in self.dead_owners,
        )

    def teardown(self) -> None:
        self.store.close()

    # -- reference semantics -------------------------------------------------------------

    def _expected_claim(self, scope: str, key: str, fingerprint: str) -> type:
        now = self.clock.now
        record = self.records.get((scope, key))
        if record is not None:
            if record.state.is_final and record.expires_at <= now:
                live_tombstone = record.expires_at + TOMBSTONE_RETENTION > now
                return Expired if live_tombstone and self.policy == "reject" else Claimed
            if record.fingerprint != fingerprint:
                return Mismatch
            return InProgress if record.state.is_in_flight else Replay
        tombstone = self.tombstones.get((scope, key))
        if tombstone is not None and tombstone.until > now and self.policy == "reject":
            return Expired
        return Claimed

    # -- rules ------------------------------------------------------------------------------

    @rule(scope=SCOPES, key=KEYS, command_type=TYPES, slot=SLOTS, accepted=st.booleans())
    def claim(self, scope: str, key: str, command_type: str, slot: str, accepted: bool) -> None:
        payload = f'{{"slot": "{slot}"}}'
        fingerprint = command_fingerprint(scope, command_type, payload)
        expected = self._expected_claim(scope, key, fingerprint)
        initial = State.ACCEPTED if accepted else State.IN_PROGRESS
        outcome = self.store.claim(
            scope=scope,
            key=key,
            robot_id=scope,
            command_type=command_type,
            payload_json=payload,
            initial_state=initial,
        )
        assert type(outcome) is expected, (outcome, expected)
        if isinstance(outcome, Replay):
            stored = self.records[(scope, key)]
            assert (outcome.status_code, outcome.result_json) == (
                stored.status_code,
                stored.result_json,
            )
        if isinstance(outcome, Claimed):
            self.tombstones.pop((scope, key), None)
            self.records[(scope, key)] = ModelRecord(
                fingerprint, command_type, initial, 202, "", 0.0
            )

    @rule(scope=SCOPES, key=KEYS, failed=st.booleans(), code=st.sampled_from([200, 201, 500]))
    def finish(self, scope: str, key: str, failed: bool, code: int) -> None:
        state = State.FAILED if failed else State.COMPLETED
        body = f'{{"code": {code}}}'
        record = self.records.get((scope, key))
        try:
            stored = self.store.finish(scope, key, state=state, status_code=code, result_json=body)
        except UnknownKey:
            assert record is None
            return
        except Exception:
            assert record is not None and record.state.is_final
            assert (record.state, record.status_code, record.result_json) != (state, code, body)
            return
        assert record is not None
        if record.state.is_final:
            assert (stored.state, stored.status_code) == (record.state, record.status_code)
            return
        self.records[(scope, key)] = replace(
            record,
            state=state,
            status_code=code,
            result_json=body,
            expires_at=self.clock.now + RETENTION,
        )

    @rule(scope=SCOPES, key=KEYS)
    def release(self, scope: str, key: str) -> None:
        record = self.records.get((scope, key))
        try:
            self.store.release(scope, key)
        except UnknownKey:
            assert record is None
            return
        except NotClaimed:
            assert record is not None and record.state.is_final
            return
        assert record is not None and record.state.is_in_flight
        del self.records[(scope, key)]

    @rule(scope=SCOPES, key=KEYS)
    def advance(self, scope: str, key: str) -> None:
        record = self.records.get((scope, key))
        try:
            self.store.advance(scope, key)
        except UnknownKey:
            assert record is None
            return
        except NotClaimed:
            assert record is not None and record.state.is_final
            return
        assert record is not None and record.state.is_in_flight
        self.records[(scope, key)] = replace(record, state=State.IN_PROGRESS)

    @rule(seconds=st.sampled_from([1.0, 60.0, 150.0, 400.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def gc(self) -> None:
        self.store.gc()
        now = self.clock.now
        for scope_key, record in list(self.records.items()):
            if record.state.is_final and record.expires_at <= now:
                del self.records[scope_key]
                until = record.expires_at + TOMBSTONE_RETENTION
                if until > now:
                    self.tombstones[scope_key] = ModelTombstone(
                        record.state, record.status_code, until
                    )
        for scope_key, tombstone in list(self.tombstones.items()):
            if tombstone.until <= now:
                del self.tombstones[scope_key]

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self._open(new_process=False)
        assert self.store.last_recovery.resumed == []
        assert self.store.last_recovery.interrupted == []

    @precondition(lambda self: any(r.state.is_in_flight for r in self.records.values()))
    @rule()
    def crash_and_restart(self) -> None:
        self.dead_owners.add(self.store.owner)
        self.store.close()
        self.store = self._open()
        report = self.store.last_recovery
        now = self.clock.now
        expected_resumed, expected_interrupted = set(), set()
        for scope_key, record in list(self.records.items()):
            if not record.state.is_in_flight:
                continue
            if record.state == State.ACCEPTED or record.command_type == "move_to_waypoint":
                expected_resumed.add(scope_key)
            else:
                expected_interrupted.add(scope_key)
                self.records[scope_key] = replace(
                    record,
                    state=State.INTERRUPTED,
                    status_code=500,
                    result_json="",
                    expires_at=now + RETENTION,
                )
        assert {(r.scope, r.key) for r in report.resumed} == expected_resumed
        assert {(r.scope, r.key) for r in report.interrupted} == expected_interrupted
        for record in report.interrupted:  # the body is generated by the store: adopt it
            scope_key = (record.scope, record.key)
            self.records[scope_key] = replace(
                self.records[scope_key], result_json=record.result_json
            )

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def status_check_matches_model(self) -> None:
        for scope in ("amr-1", "arm-2"):
            for key in ("k1", "k2", "k3"):
                found = self.store.check(scope, key)
                record = self.records.get((scope, key))
                tombstone = self.tombstones.get((scope, key))
                if record is not None:
                    assert isinstance(found, Record)
                    assert (found.fingerprint, found.state) == (record.fingerprint, record.state)
                    if record.state.is_final:
                        assert (found.status_code, found.result_json) == (
                            record.status_code,
                            record.result_json,
                        )
                        assert found.expires_at == record.expires_at
                elif tombstone is not None:
                    assert isinstance(found, Tombstone)
                    assert (found.state, found.status_code) == (
                        tombstone.state,
                        tombstone.status_code,
                    )
                    assert found.tombstone_expires_at == tombstone.until
                else:
                    assert found is None


def _settings(location: Location) -> settings:
    # PostgreSQL: fewer examples. Each example opens its store several times (a pool, a
    # schema) and every step's invariant reads through a server round trip, about ten
    # times the cost of an LMDB read; 100 examples there would take minutes on 2 cores,
    # while the rules, the model and the oracle are the same ones the LMDB run covers.
    return settings(
        max_examples=30 if is_postgres(location) else 100,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


@pytest.mark.parametrize("policy", ["reject", "new"])
def test_store_against_model(
    store_location: Location, fresh_store_config: Callable[..., StoreConfig], policy: str
) -> None:
    run_state_machine_as_test(
        lambda: StoreMachine(fresh_store_config, policy), settings=_settings(store_location)
    )
