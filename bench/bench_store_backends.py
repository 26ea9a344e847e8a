"""The orchestrator's key store on LMDB and on PostgreSQL, side by side in one run.

Not a test: prints ``name=value`` lines. For each backend: the latency of one claim and of
claim + finish (the orchestrator's per-command store work), then sustained claims/s from
1 and 2 processes with 8 threads each (2 processes = 2 replicas sharing one store). The
PostgreSQL server is a throwaway local one (``bringup/postgres.py``), durable
(``synchronous_commit`` on), on the same disk as the LMDB files.

Usage: ``.venv/bin/python bench/bench_store_backends.py [--claims 2000]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from fleet_idempotency.bringup.postgres import LocalPostgres
from fleet_idempotency.store import IdempotencyStore, State, StoreConfig

PAYLOAD = json.dumps({"dock": "D2"})
THREADS = 8


def config_for(location: str) -> StoreConfig:
    if location.startswith("postgresql://"):
        return StoreConfig(url=location, default_recovery_policy="resume")
    return StoreConfig(path=Path(location), default_recovery_policy="resume")


def claim(store: IdempotencyStore, key: str) -> None:
    store.claim(
        scope="wms",
        key=key,
        robot_id="amr_1",
        command_type="dock",
        payload_json=PAYLOAD,
        initial_state=State.ACCEPTED,
    )


def latency(location: str, samples: int) -> dict[str, float]:
    store = IdempotencyStore.open(config_for(location), recover=False)
    prefix = uuid.uuid4().hex[:8]
    claims, finishes = [], []
    for index in range(samples):
        key = f"lat-{prefix}-{index}"
        started = time.perf_counter()
        claim(store, key)
        claimed = time.perf_counter()
        store.finish("wms", key, state=State.COMPLETED, status_code=200, result_json="{}")
        finishes.append(time.perf_counter() - started)
        claims.append(claimed - started)
    store.close()
    return {
        "claim_p50_ms": statistics.median(claims) * 1e3,
        "claim_finish_p50_ms": statistics.median(finishes) * 1e3,
    }


def _hammer(location: str, keys: int, start: Any, done: Any) -> None:
    store = IdempotencyStore.open(config_for(location), recover=False)
    prefix = uuid.uuid4().hex[:8]

    def worker(offset: int) -> None:
        for index in range(offset, keys, THREADS):
            claim(store, f"tp-{prefix}-{index}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    start.wait()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.put(time.perf_counter())
    store.close()


def claims_per_s(location: str, processes: int, keys_each: int) -> float:
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Barrier(processes + 1)
    done = spawn.Queue()
    workers = [
        spawn.Process(target=_hammer, args=(location, keys_each, start, done))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    start.wait()
    started = time.perf_counter()
    ended = max(done.get(timeout=600) for _ in workers)
    for worker in workers:
        worker.join()
    return processes * keys_each / (ended - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=2000, help="claims per process")
    parser.add_argument("--latency-samples", type=int, default=300)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, LocalPostgres() as postgres:
        locations = {"lmdb": str(Path(scratch) / "keys"), "postgres": postgres.url}
        for name, location in locations.items():
            for figure, value in latency(location, options.latency_samples).items():
                print(f"{name}_{figure}={value:.3f}", flush=True)
        for name, location in locations.items():
            for processes in (1, 2):
                rate = claims_per_s(location, processes, options.claims)
                print(f"{name}_claims_per_s_{processes}_process={rate:.0f}", flush=True)


if __name__ == "__main__":
    main()
