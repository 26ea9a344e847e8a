"""Benchmark of the idempotency store against its raw engine and two peers.

Not a test: prints ``name=value`` lines, all measured in one run on one machine.
Usage: ``PYTHONPATH=. python bench/bench_store.py [--scale 0.1] [--skip-peers]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

from fleet_idempotency.store import ClaimRequest, IdempotencyStore, State, StoreConfig
from fleet_idempotency.store.persistence.codec import decode_record, encode_record

ROBOT = "amr-1"
PAYLOAD = json.dumps({"slot": "A1", "pallet": "P-0042"})
RESULT = json.dumps({"picked": "P-0042"})


def emit(name: str, value: object) -> None:
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    print(f"{name}={text}", flush=True)


def per_op_us(fn: Callable[[], object], repeat: int) -> float:
    """Median over 5 rounds of the mean per-call time, in microseconds."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeat):
            fn()
        rounds.append((time.perf_counter() - started) / repeat * 1e6)
    return statistics.median(rounds)


def claim_kwargs(key: str) -> dict[str, Any]:
    return {
        "scope": ROBOT,
        "key": key,
        "robot_id": ROBOT,
        "command_type": "pick",
        "payload_json": PAYLOAD,
    }


# -- 1. duplicate check ---------------------------------------------------------------------


def bench_duplicate_check(root: Path) -> None:
    with IdempotencyStore.open(StoreConfig(path=root / "dup")) as store:
        store.claim(**claim_kwargs("seen"))
        store.finish(ROBOT, "seen", state=State.COMPLETED, status_code=200, result_json=RESULT)
        claim_us = per_op_us(lambda: store.claim(**claim_kwargs("seen")), 5000)
        check_us = per_op_us(lambda: store.check(ROBOT, "seen"), 5000)
    env = lmdb.open(str(root / "raw"), map_size=1 << 26)
    with env.begin(write=True) as txn:
        txn.put(b"amr-1\x00seen", b"x" * 300)

    def raw_get() -> object:
        with env.begin() as txn:
            return txn.get(b"amr-1\x00seen")

    raw_us = per_op_us(raw_get, 20000)
    env.close()
    # The floor of any answer that hands the caller a Record: decoding one stored value.
    with IdempotencyStore.open(StoreConfig(path=root / "dup", durable=False)) as store:
        stored = encode_record(store.check(ROBOT, "seen"))  # type: ignore[arg-type]
    decode_us = per_op_us(lambda: decode_record(b"amr-1\x00seen", stored), 20000)
    emit("record_decode_only_us", decode_us)
    emit("raw_get_plus_decode_us", raw_us + decode_us)
    emit("dup_claim_replay_us", claim_us)
    emit("dup_status_check_us", check_us)
    emit("raw_lmdb_get_us", raw_us)
    emit("dup_claim_vs_raw_get_ratio", claim_us / raw_us)
    emit("dup_status_check_vs_raw_get_ratio", check_us / raw_us)


# -- 2. single durable claim ----------------------------------------------------------------


def raw_fdatasync_us(root: Path, repeat: int = 300) -> float:
    fd = os.open(root / "raw-sync", os.O_WRONLY | os.O_CREAT, 0o644)
    try:

        def one() -> None:
            os.pwrite(fd, b"k" * 200, 0)
            os.fdatasync(fd)

        return per_op_us(one, repeat // 5)
    finally:
        os.close(fd)


def bench_single_claim(root: Path) -> dict[bool, float]:
    raw = raw_fdatasync_us(root)
    emit("raw_fdatasync_us", raw)
    raw_commit: dict[bool, float] = {}
    for metasync in (True, False):
        env = lmdb.open(str(root / f"raw-commit-{metasync}"), map_size=1 << 26, metasync=metasync)
        keys = iter(range(10**9))

        def raw_commit_once(env: Any = env, keys: Any = keys) -> None:
            with env.begin(write=True) as txn:
                txn.put(b"amr-1\x00k%d" % next(keys), b"x" * 300)

        raw_commit[metasync] = per_op_us(raw_commit_once, 60)
        emit(
            f"raw_lmdb_durable_commit_{'metasync' if metasync else 'nometasync'}_us",
            raw_commit[metasync],
        )
        env.close()
    for metasync in (True, False):
        label = "metasync" if metasync else "nometasync"
        config = StoreConfig(path=root / f"single-{label}", metasync=metasync)
        with IdempotencyStore.open(config) as store:
            keys = iter(range(10**9))

            def claim_next(store: IdempotencyStore = store, keys: Any = keys) -> object:
                return store.claim(**claim_kwargs(f"k{next(keys)}"))

            us = per_op_us(claim_next, 60)
        emit(f"durable_claim_{label}_us", us)
        emit(f"durable_claim_{label}_vs_fdatasync_ratio", us / raw)
        emit(f"durable_claim_{label}_vs_raw_lmdb_commit_ratio", us / raw_commit[metasync])
    return raw_commit


# -- 3. concurrent claims -------------------------------------------------------------------


def bench_concurrent(
    root: Path, raw_commit_us: float, threads_n: int = 8, seconds: float = 3.0
) -> None:
    # A thread has one claim in flight, so no commit can carry more than threads_n claims.
    emit(f"concurrent_{threads_n}t_ceiling_claims_per_s", threads_n / raw_commit_us * 1e6)
    with IdempotencyStore.open(StoreConfig(path=root / "concurrent")) as store:
        stop = threading.Event()
        done = [0] * threads_n

        def worker(t: int) -> None:
            i = 0
            while not stop.is_set():
                store.claim(**claim_kwargs(f"t{t}-{i}"))
                i += 1
            done[t] = i

        workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
        before = store.stats()["commits"]
        started = time.perf_counter()
        for thread in workers:
            thread.start()
        time.sleep(seconds)
        stop.set()
        for thread in workers:
            thread.join()
        elapsed = time.perf_counter() - started
        stats = store.stats()
    commits = stats["commits"] - before
    emit(f"concurrent_{threads_n}t_durable_claims_per_s", sum(done) / elapsed)
    emit(f"concurrent_{threads_n}t_claims_per_commit", sum(done) / max(1, commits))
    emit(f"concurrent_{threads_n}t_claim_p99_ms", stats["claim_latency_p99_s"] * 1e3)
    batch = 512
    with IdempotencyStore.open(StoreConfig(path=root / "batch")) as store:
        started = time.perf_counter()
        rounds = 40
        for r in range(rounds):
            store.claim_many([ClaimRequest(**claim_kwargs(f"b{r}-{i}")) for i in range(batch)])
        emit(
            "claim_many_512_durable_claims_per_s", rounds * batch / (time.perf_counter() - started)
        )


# -- 4. GC under load -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def bench_gc(root: Path, scale: float) -> None:
    total = max(1000, int(1_000_000 * scale))
    expiring = total // 10
    clock = Clock()
    path = root / "gc"
    fast = StoreConfig(path=path, durable=False, map_size_max=8 << 30)
    started = time.perf_counter()
    with IdempotencyStore.open(fast, clock=clock) as store:
        chunk = 5000
        for base in range(0, total, chunk):
            store.claim_many(
                [
                    ClaimRequest(
                        **claim_kwargs(f"k{i:08d}"), retention_s=10.0 if i % 10 == 0 else 1e7
                    )
                    for i in range(base, min(total, base + chunk))
                ]
            )
        for i in range(0, total, 10):
            store.finish(
                ROBOT, f"k{i:08d}", state=State.COMPLETED, status_code=200, result_json=RESULT
            )
    emit("gc_populate_s", time.perf_counter() - started)
    clock.now += 60
    durable = StoreConfig(path=path, map_size_max=8 << 30)
    with IdempotencyStore.open(durable, clock=clock) as store:
        baseline = [0.0]

        def claim_timed(key: str) -> float:
            t0 = time.perf_counter()
            store.claim(**claim_kwargs(key))
            return time.perf_counter() - t0

        baseline = [claim_timed(f"base-{i}") for i in range(300)]
        latencies: list[float] = []
        running = threading.Event()
        running.set()

        def claimer() -> None:
            i = 0
            while running.is_set():
                latencies.append(claim_timed(f"during-{i}"))
                i += 1

        thread = threading.Thread(target=claimer)
        thread.start()
        t0 = time.perf_counter()
        report = store.gc()
        gc_s = time.perf_counter() - t0
        running.clear()
        thread.join()
    emit("gc_records_total", total)
    emit("gc_records_purged", report.records_purged)
    emit("gc_expected_purged", expiring)
    emit("gc_batches", report.batches)
    emit("gc_seconds", gc_s)
    emit("gc_purged_per_s", report.records_purged / gc_s)
    emit("claim_latency_no_gc_max_ms", max(baseline) * 1e3)
    emit("claims_during_gc", len(latencies))
    if latencies:
        emit("claim_latency_during_gc_p50_ms", statistics.median(latencies) * 1e3)
        emit("claim_latency_during_gc_p99_ms", sorted(latencies)[int(0.99 * len(latencies))] * 1e3)
        emit("claim_latency_during_gc_max_ms", max(latencies) * 1e3)


# -- 5. peers: same claim/finish workload ---------------------------------------------------


def workload_ours(root: Path, n: int) -> tuple[float, float]:
    with IdempotencyStore.open(StoreConfig(path=root / "peer-ours")) as store:
        t0 = time.perf_counter()
        for i in range(n):
            store.claim(**claim_kwargs(f"w{i}"))
            store.finish(ROBOT, f"w{i}", state=State.COMPLETED, status_code=200, result_json=RESULT)
        new_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(n):
            store.claim(**claim_kwargs(f"w{i}"))
        return new_s / n * 1e6, (time.perf_counter() - t0) / n * 1e6


class SqliteStore:
    """A plain INSERT OR IGNORE idempotency table, fsync per commit (synchronous=FULL)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS idem (scope TEXT, key TEXT, fingerprint TEXT, state INT,"
            " code INT, result TEXT, payload TEXT, created REAL, expires REAL,"
            " PRIMARY KEY (scope, key)) WITHOUT ROWID"
        )

    def claim(self, key: str) -> tuple[str, Any]:
        import hashlib

        fp = hashlib.sha256(PAYLOAD.encode()).hexdigest()
        now = time.time()
        cur = self.db.execute(
            "INSERT OR IGNORE INTO idem VALUES (?,?,?,?,?,?,?,?,?)",
            (ROBOT, key, fp, 2, 202, "", PAYLOAD, now, now + 86400),
        )
        if cur.rowcount == 1:
            return "claimed", None
        row = self.db.execute(
            "SELECT fingerprint, state, code, result FROM idem WHERE scope=? AND key=?",
            (ROBOT, key),
        ).fetchone()
        return "duplicate", row

    def finish(self, key: str) -> None:
        self.db.execute(
            "UPDATE idem SET state=3, code=200, result=? WHERE scope=? AND key=?",
            (RESULT, ROBOT, key),
        )


def workload_sqlite(root: Path, n: int) -> tuple[float, float]:
    store = SqliteStore(root / "peer.sqlite")
    t0 = time.perf_counter()
    for i in range(n):
        store.claim(f"w{i}")
        store.finish(f"w{i}")
    new_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(n):
        store.claim(f"w{i}")
    dup_s = time.perf_counter() - t0
    store.db.close()
    return new_s / n * 1e6, dup_s / n * 1e6


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ensure_powertools() -> str | None:
    try:
        import redis  # noqa: F401
        from aws_lambda_powertools.utilities.idempotency.persistence import redis as _layer  # noqa: F401
    except ImportError:
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "aws-lambda-powertools[redis]", "boto3"],
            check=False,
            capture_output=True,
            text=True,
        )
        if pip.returncode != 0:
            return f"pip install aws-lambda-powertools[redis] failed: {pip.stderr.strip()[-200:]}"
    if shutil.which("redis-server") is None:
        apt = subprocess.run(
            ["apt-get", "install", "-y", "redis-server"],
            check=False,
            capture_output=True,
            text=True,
        )
        if apt.returncode != 0 or shutil.which("redis-server") is None:
            return f"apt-get install redis-server failed: {apt.stderr.strip()[-200:]}"
    return None


def workload_powertools(root: Path, n: int) -> tuple[float, float] | str:
    reason = _ensure_powertools()
    if reason is not None:
        return reason
    import redis
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from aws_lambda_powertools.utilities.idempotency.persistence.redis import (
        RedisCachePersistenceLayer,
    )

    port = _free_port()
    data_dir = root / "redis"
    data_dir.mkdir()
    # appendfsync always: every write is fsync'd before the reply, the same durability as ours.
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
         "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    return "redis-server did not start"
                time.sleep(0.01)
        layer = RedisCachePersistenceLayer(client=client)
        config = IdempotencyConfig(event_key_jmespath="key", use_local_cache=False)

        @idempotent_function(
            data_keyword_argument="command", persistence_store=layer, config=config
        )
        def execute(command: dict[str, Any]) -> dict[str, Any]:
            return {"picked": command["payload"]["pallet"]}

        payload = json.loads(PAYLOAD)
        t0 = time.perf_counter()
        for i in range(n):
            execute(command={"key": f"w{i}", "robot": ROBOT, "payload": payload})
        new_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(n):
            execute(command={"key": f"w{i}", "robot": ROBOT, "payload": payload})
        dup_s = time.perf_counter() - t0
        return new_s / n * 1e6, dup_s / n * 1e6
    finally:
        server.terminate()
        server.wait(10)


def bench_peers(root: Path, n: int, skip_peers: bool) -> None:
    ours = workload_ours(root, n)
    emit("workload_ours_claim_finish_us", ours[0])
    emit("workload_ours_duplicate_us", ours[1])
    sqlite_figures = workload_sqlite(root, n)
    emit("workload_sqlite_claim_finish_us", sqlite_figures[0])
    emit("workload_sqlite_duplicate_us", sqlite_figures[1])
    if skip_peers:
        print("# powertools: skipped (--skip-peers)")
        return
    try:
        powertools = workload_powertools(root, n)
    except Exception as exc:  # a peer's failure must not hide our own figures
        powertools = f"{type(exc).__name__}: {exc}"
    if isinstance(powertools, str):
        print(f"# powertools+redis: skipped: {powertools}")
        return
    emit("workload_powertools_redis_claim_finish_us", powertools[0])
    emit("workload_powertools_redis_duplicate_us", powertools[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--scale", type=float, default=1.0, help="GC size factor (1.0: 100k expired among 1M)"
    )
    parser.add_argument("--workload", type=int, default=500, help="keys in the peer workload")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to put the files (default: a temp dir)"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-store-", dir=args.dir))
    try:
        emit("python", sys.version.split()[0])
        emit("lmdb", lmdb.__version__)
        bench_duplicate_check(root)
        raw_commit = bench_single_claim(root)
        bench_concurrent(root, raw_commit[True])
        bench_peers(root, args.workload, args.skip_peers)
        bench_gc(root, args.scale)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
