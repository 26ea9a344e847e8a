"""Operator tool for the orchestrator's event log: ``fleet-idem-events --path WHERE COMMAND``.

WHERE is an LMDB directory or a ``postgresql://`` URL (with ``--schema``). Read-only: LMDB
is opened read-only, which takes no writer lock, and PostgreSQL sessions are read-only on
the server's side, so the tool can run next to orchestrators appending to the same log.

Exit codes: 0 ok, 2 bad usage, 3 event log missing or unreadable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from fleet_idempotency.events import (
    EventLog,
    EventLogConfig,
    EventLogError,
    EventType,
    FleetEventRecord,
    open_event_log,
    replay,
)
from fleet_idempotency.events.config import POSTGRES_SCHEME

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_LOG_ERROR = 3
PATH_ENV = "FLEET_IDEM_EVENTS"
SCHEMA_ENV = "FLEET_IDEM_EVENTS_SCHEMA"
DEFAULT_SCHEMA = EventLogConfig.model_fields["pg_schema"].default
PROG = "fleet-idem-events"


def _event_type_arg(text: str) -> EventType:
    try:
        return EventType(text.lower())
    except ValueError:
        names = ", ".join(kind.value for kind in EventType)
        raise argparse.ArgumentTypeError(
            f"unknown event type {text!r}; choose one of {names}"
        ) from None


def _count_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Inspect the orchestrator's event log (read-only)."
    )
    parser.add_argument(
        "--path",
        default=os.environ.get(PATH_ENV),
        help=f"event log directory or {POSTGRES_SCHEME} URL (default: ${PATH_ENV})",
    )
    parser.add_argument(
        "--schema",
        default=os.environ.get(SCHEMA_ENV, DEFAULT_SCHEMA),
        help=f"PostgreSQL schema of the log (default: ${SCHEMA_ENV} or {DEFAULT_SCHEMA})",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    printing = commands.add_parser("print", help="one readable line per event")
    printing.add_argument("--after", type=_count_arg, default=0, metavar="N", help="sequence > N")
    printing.add_argument("--key", help="only events of this idempotency key")
    printing.add_argument("--client", help="only events of this client id")
    printing.add_argument("--type", type=_event_type_arg, help="only events of this type")
    export = commands.add_parser("export", help="events as JSON lines (FleetEventRecord.to_dict)")
    export.add_argument("--after", type=_count_arg, default=0, metavar="N", help="sequence > N")
    commands.add_parser("replay", help="fold the log and print the state summary as JSON")
    commands.add_parser("stats", help="counts and sizes as name=value lines")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse already printed why
        return EXIT_OK if exit_request.code == 0 else EXIT_USAGE
    if not args.path:
        _complain(f"no event log given; use --path DIR|URL or set ${PATH_ENV}")
        return EXIT_USAGE
    try:
        config = _config(args.path, args.schema)
    except ValueError as exc:  # pydantic's, naming the field
        _complain(f"bad event log location: {exc}")
        return EXIT_USAGE
    if config.path is not None and not (config.path / "data.mdb").exists():
        _complain(f"no event log at {config.path} (data.mdb not found)")
        return EXIT_LOG_ERROR
    try:
        with open_event_log(config, readonly=True) as log:
            _run(log, args)
    except EventLogError as exc:
        _complain(str(exc))
        return EXIT_LOG_ERROR
    except BrokenPipeError:  # e.g. piped into `head`: the reader has all it wanted
        # Point stdout at devnull so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


def _config(where: str, schema: str) -> EventLogConfig:
    if where.startswith(POSTGRES_SCHEME):
        return EventLogConfig(url=where, pg_schema=schema)
    return EventLogConfig(path=Path(where))


def _complain(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def _run(log: EventLog, args: argparse.Namespace) -> None:
    out = sys.stdout
    if args.command == "print":
        for event in _selected(log, args):
            out.write(_event_line(event) + "\n")
    elif args.command == "export":
        for event in log.read(after_sequence=args.after):
            out.write(json.dumps(event.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
    elif args.command == "replay":
        out.write(json.dumps(replay(log.read()).summary(), indent=2, sort_keys=True) + "\n")
    else:  # stats
        for name, value in sorted(log.stats().items()):
            out.write(f"{name}={value}\n")


def _selected(log: EventLog, args: argparse.Namespace) -> Iterator[FleetEventRecord]:
    if args.client is not None and args.key is not None:
        # Both given: the (client, key) index answers without scanning the log.
        events: Iterator[FleetEventRecord] = iter(log.events_for(args.client, args.key))
    else:
        events = log.read(after_sequence=args.after)
    for event in events:
        if (
            event.sequence > args.after
            and (args.key is None or event.key == args.key)
            and (args.client is None or event.client_id == args.client)
            and (args.type is None or event.event_type is args.type)
        ):
            yield event


def _event_line(event: FleetEventRecord) -> str:
    try:
        when = datetime.fromtimestamp(event.stamp, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):  # a stamp outside the calendar: show it raw
        when = repr(event.stamp)
    discriminator = f"#{event.discriminator}" if event.discriminator else "-"
    detail = json.dumps(event.detail, ensure_ascii=False, sort_keys=True)
    return (
        f"{event.sequence}\t{when}\t{event.event_type.value}\t{event.client_id or '-'}\t"
        f"{event.key or '-'}\t{event.robot_id or '-'}\t{discriminator}\t{detail}"
    )


if __name__ == "__main__":
    sys.exit(main())
