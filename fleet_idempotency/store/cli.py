"""Operator CLI for a store on a robot: ``fleet-idem-store --path DIR COMMAND``.

Read-only unless the command says otherwise (only ``gc`` writes). Opening LMDB read-only
takes no writer lock, so inspecting a store never blocks or disturbs a running agent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .config import StoreConfig
from .errors import StoreError
from .idempotency import IdempotencyStore
from .records import Record, State

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_STORE_ERROR = 3
PATH_ENV = "FLEET_IDEM_STORE"


def _state_arg(text: str) -> State:
    try:
        return State[text.upper()]
    except KeyError:
        names = ", ".join(s.name.lower() for s in State)
        raise argparse.ArgumentTypeError(f"unknown state {text!r}; choose one of {names}") from None


def _seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleet-idem-store",
        description="Inspect a fleet_idempotency store. Read-only except 'gc'.",
    )
    parser.add_argument(
        "--path",
        default=os.environ.get(PATH_ENV),
        help=f"store directory (default: ${PATH_ENV})",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="list records (one line each)")
    listing.add_argument("--state", type=_state_arg, help="only records in this state")
    listing.add_argument("--type", dest="command_type", help="only this command type")
    listing.add_argument(
        "--older-than", type=_seconds_arg, metavar="SECONDS", help="created more than SECONDS ago"
    )
    listing.add_argument("--scope", help="only this scope (robot id or client id)")
    show = commands.add_parser("show", help="show one key as JSON (record or tombstone)")
    show.add_argument("key")
    show.add_argument("--scope", help="scope of the key; all scopes are searched if omitted")
    commands.add_parser("stats", help="counts and sizes as name=value lines")
    gc = commands.add_parser("gc", help="WRITES: purge expired records and tombstones")
    gc.add_argument("--max-batches", type=int, default=None)
    commands.add_parser("export", help="every record and tombstone as JSON lines")
    return parser


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:
        return int(exit_request.code or 0)
    if not args.path:
        print(f"fleet-idem-store: no store given; use --path DIR or set ${PATH_ENV}", file=err)
        return EXIT_USAGE
    path = Path(args.path)
    if not (path / "data.mdb").exists():
        print(f"fleet-idem-store: no store at {path} (data.mdb not found)", file=err)
        return EXIT_STORE_ERROR
    writes = args.command == "gc"
    try:
        config = StoreConfig(path=path)
        if writes:
            print(f"gc: this command writes to the store at {path}", file=err)
        with IdempotencyStore.open(config, readonly=not writes, recover=False) as store:
            return _run(store, args, out, err)
    except StoreError as exc:
        print(f"fleet-idem-store: {exc}", file=err)
        return EXIT_STORE_ERROR
    except BrokenPipeError:  # e.g. piped into `head`
        return EXIT_OK


def _run(store: IdempotencyStore, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.command == "list":
        for record in store.iter_records(
            state=args.state,
            command_type=args.command_type,
            older_than_s=args.older_than,
            scope=args.scope,
        ):
            print(_list_line(record), file=out)
        return EXIT_OK
    if args.command == "show":
        found = [
            store.check(scope, args.key)
            for scope in ([args.scope] if args.scope else _scopes_with_key(store, args.key))
        ]
        hits = [entry for entry in found if entry is not None]
        if not hits:
            print(f"fleet-idem-store: key {args.key!r} not found", file=err)
            return EXIT_NOT_FOUND
        for entry in hits:
            kind = "record" if isinstance(entry, Record) else "tombstone"
            print(json.dumps({"kind": kind, **entry.to_dict()}, sort_keys=True), file=out)
        return EXIT_OK
    if args.command == "stats":
        for name, value in sorted(store.stats().items()):
            print(f"{name}={value}", file=out)
        return EXIT_OK
    if args.command == "gc":
        report = store.gc(max_batches=args.max_batches)
        for name in (
            "records_purged",
            "tombstones_written",
            "tombstones_purged",
            "in_flight_deferred",
            "batches",
        ):
            print(f"{name}={getattr(report, name)}", file=out)
        return EXIT_OK
    # export
    for record in store.iter_records():
        print(json.dumps({"kind": "record", **record.to_dict()}, sort_keys=True), file=out)
    for tombstone in store.iter_tombstones():
        print(json.dumps({"kind": "tombstone", **tombstone.to_dict()}, sort_keys=True), file=out)
    return EXIT_OK


def _scopes_with_key(store: IdempotencyStore, key: str) -> list[str]:
    scopes = {r.scope for r in store.iter_records() if r.key == key}
    scopes.update(t.scope for t in store.iter_tombstones() if t.key == key)
    return sorted(scopes)


def _list_line(record: Record) -> str:
    age_s = max(0.0, time.time() - record.created_at)
    return (
        f"{record.scope}\t{record.key}\t{record.state.name}\t{record.status_code}\t"
        f"{record.command_type}\tage={age_s:.0f}s"
    )


if __name__ == "__main__":
    sys.exit(main())
