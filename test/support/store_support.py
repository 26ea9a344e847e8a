"""Shared helpers of the store tests, and the child-process entry point they spawn.

Children are real processes (``python store_support.py MODE ...``) so that crashes are
real SIGKILLs and cross-process locking is LMDB's own, not simulated.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def make_config(path: Path, **overrides: Any) -> StoreConfig:
    settings: dict[str, Any] = {"path": path}
    settings.update(overrides)
    return StoreConfig(**settings)


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


def _child_claim_and_hold(path: str, *keys: str) -> None:
    store = IdempotencyStore.open(make_config(Path(path)))
    for key in keys:
        command_type = "move_to_waypoint" if key.startswith("move") else "pick"
        outcome = store.claim(**claim_args(key, command_type=command_type))
        _ack(f"{type(outcome).__name__} {key}")
    _ack("ready")
    sys.stdin.read()  # hold the claims until the parent kills us or closes stdin


def _child_race(path: str, prefix: str, count: str, seed: str) -> None:
    keys = [f"{prefix}{i}" for i in range(int(count))]
    random.Random(int(seed)).shuffle(keys)
    _ack("started")
    sys.stdin.readline()  # start signal: all racers begin together
    store = IdempotencyStore.open(make_config(Path(path)))
    won = [key for key in keys if type(store.claim(**claim_args(key))).__name__ == "Claimed"]
    store.close()
    _ack(json.dumps(won))


def _child_crash_loop(path: str, seed: str) -> None:
    rng = random.Random(int(seed))
    store = IdempotencyStore.open(make_config(Path(path)))
    _ack("open")
    for i in range(1_000_000):
        key = f"{seed}-{i}"
        command_type = rng.choice(["move_to_waypoint", "pick", "place"])
        store.claim(**claim_args(key, command_type=command_type))
        _ack(f"C {key} {command_type}")
        if rng.random() < 0.5:
            store.finish(ROBOT, key, state=3, status_code=200, result_json=json.dumps({"i": i}))
            _ack(f"F {key}")


def _child_recover(path: str) -> None:
    _ack("started")
    sys.stdin.readline()
    store = IdempotencyStore.open(make_config(Path(path)))
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


_MODES: dict[str, Callable[..., None]] = {
    "claim_and_hold": _child_claim_and_hold,
    "race": _child_race,
    "crash_loop": _child_crash_loop,
    "recover": _child_recover,
    "grow": _child_grow,
}

if __name__ == "__main__":
    _MODES[sys.argv[1]](*sys.argv[2:])
