"""Shared helpers of the store tests, and the child-process entry point they spawn.

Children are real processes (``python store_support.py MODE ...``) so that crashes are
real SIGKILLs and cross-process locking is the engine's own (LMDB's writer lock,
PostgreSQL's transactions), not simulated.

A store's *location* is an LMDB directory or a ``postgresql://`` URL; ``store_location``
gives each test one of each kind (ids ``[lmdb]``, ``[postgres]``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from fleet_idempotency.store import (  # noqa: E402
    IdempotencyStore,
    StoreConfig,
)

ROBOT = "amr-1"


class FakeClock:
    """Injected time: TTL tests advance it instead of sleeping."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


Location = Path | str
BACKENDS = ["lmdb", "postgres"]


def is_postgres(location: Location) -> bool:
    return isinstance(location, str) and location.startswith("postgresql://")


def make_config(location: Location, **overrides: Any) -> StoreConfig:
    """A config for the store at ``location`` (a directory, or a PostgreSQL URL)."""
    settings: dict[str, Any] = (
        {"url": location} if is_postgres(location) else {"path": Path(location)}
    )
    settings.update(overrides)
    return StoreConfig(**settings)


@pytest.fixture(params=BACKENDS)
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """Where this test's store lives: an LMDB directory, or an empty PostgreSQL database."""
    if request.param == "lmdb":
        return tmp_path / "s"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def fresh_store_config(store_location: Location) -> Iterator[Callable[..., StoreConfig]]:
    """A factory of configs, each naming a store of its own (for one test, many stores).

    LMDB: a new directory each; PostgreSQL: a new schema each, in the test's database,
    which is the cheap way to get an empty store (a database takes ~100 ms to create).
    """
    made: list[Path] = []
    numbers = iter(range(1_000_000))

    def factory(**overrides: Any) -> StoreConfig:
        number = next(numbers)
        if is_postgres(store_location):
            return make_config(store_location, pg_schema=f"store_{number}", **overrides)
        made.append(Path(tempfile.mkdtemp(prefix="store-")))
        return make_config(made[-1] / "s", **overrides)

    yield factory
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def payload(**fields: Any) -> str:
    return json.dumps(fields)


def claim_args(
    key: str, *, scope: str = ROBOT, command_type: str = "pick", **fields: Any
) -> dict[str, Any]:
    return {
        "scope": scope,
        "key": key,
        "robot_id": scope,
        "command_type": command_type,
        "payload_json": payload(**(fields or {"slot": "A1"})),
    }


def wait_until(
    condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.002)


def spawn_child(mode: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), mode, *args],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        raise AssertionError(f"child exited early with code {child.wait()}")
    return line.strip()


# -- child modes -----------------------------------------------------------------------------


def _ack(text: str) -> None:
    # Written only after the store call returned: what the caller was told is durable.
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _child_claim_and_hold(location: str, *keys: str) -> None:
    store = IdempotencyStore.open(make_config(location))
    for key in keys:
        command_type = "move_to_waypoint" if key.startswith("move") else "pick"
        outcome = store.claim(**claim_args(key, command_type=command_type))
        _ack(f"{type(outcome).__name__} {key}")
    _ack("ready")
    sys.stdin.read()  # hold the claims until the parent kills us or closes stdin


def _child_race(location: str, prefix: str, count: str, seed: str) -> None:
    keys = [f"{prefix}{i}" for i in range(int(count))]
    random.Random(int(seed)).shuffle(keys)
    _ack("started")
    sys.stdin.readline()  # start signal: all racers begin together
    store = IdempotencyStore.open(make_config(location))
    won: list[str] = []
    # For each key lost, the owner named by the duplicate answer: it must be the winner.
    lost_to: dict[str, str] = {}
    for key in keys:
        outcome = store.claim(**claim_args(key))
        if type(outcome).__name__ == "Claimed":
            won.append(key)
        else:
            lost_to[key] = outcome.record.owner  # type: ignore[union-attr]
    store.close()
    _ack(json.dumps({"owner": store.owner, "won": won, "lost_to": lost_to}))


def _child_crash_loop(location: str, seed: str) -> None:
    rng = random.Random(int(seed))
    store = IdempotencyStore.open(make_config(location))
    _ack("open")
    for i in range(1_000_000):
        key = f"{seed}-{i}"
        command_type = rng.choice(["move_to_waypoint", "pick", "place"])
        store.claim(**claim_args(key, command_type=command_type))
        _ack(f"C {key} {command_type}")
        if rng.random() < 0.5:
            store.finish(ROBOT, key, state=3, status_code=200, result_json=json.dumps({"i": i}))
            _ack(f"F {key}")


def _child_recover(location: str) -> None:
    _ack("started")
    sys.stdin.readline()
    store = IdempotencyStore.open(make_config(location))
    report = store.last_recovery
    _ack(
        json.dumps(
            {
                "resumed": [r.key for r in report.resumed],
                "interrupted": [r.key for r in report.interrupted],
            }
        )
    )
    sys.stdin.read()  # stay alive so our resumed claims stay owned by a live process


def _child_grow(path: str, count: str) -> None:
    store = IdempotencyStore.open(
        make_config(Path(path), map_size_initial=256 * 1024, map_size_max=64 * 1024 * 1024)
    )
    for i in range(int(count)):
        store.claim(**claim_args(f"grow-{i}", slot="x" * 2000))
    stats = store.stats()
    store.close()
    _ack(json.dumps({"map_size": stats["map_size"]}))


def _child_finish(location: str, key: str, body: str) -> None:
    with IdempotencyStore.open(make_config(location), recover=False) as store:
        store.finish(ROBOT, key, state=3, status_code=200, result_json=body)
    _ack("finished")


_MODES: dict[str, Callable[..., None]] = {
    "finish": _child_finish,
    "claim_and_hold": _child_claim_and_hold,
    "race": _child_race,
    "crash_loop": _child_crash_loop,
    "recover": _child_recover,
    "grow": _child_grow,
}

if __name__ == "__main__":
    _MODES[sys.argv[1]](*sys.argv[2:])
