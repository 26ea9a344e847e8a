"""The event-log tool: read-only, works next to a writer, clear errors and exit codes.

Tests that read a log run on LMDB and PostgreSQL (``log_backend``; ``--path`` takes the
directory or the URL)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from fleet_idempotency.bringup.postgres import free_port
from fleet_idempotency.events import (
    EventLogConfig,
    EventType,
    FleetEventRecord,
    LmdbEventLog,
    replay,
)
from fleet_idempotency.events.cli import EXIT_LOG_ERROR, EXIT_OK, EXIT_USAGE, PATH_ENV, main
from fleet_idempotency.store import IdempotencyStore, StoreConfig

from support.event_log_support import LogBackend

STAMP = 1_700_000_000.0


def ev(
    kind: EventType, key: str, client: str = "wms", disc: str = "", **detail: object
) -> FleetEventRecord:
    return FleetEventRecord(kind, client, key, "amr-1", dict(detail), STAMP, disc)


SCENARIO = [
    ev(EventType.ACCEPTED, "k-1", robot_key="wms/k-1", command_type="pick", payload_json="{}"),
    ev(EventType.ACCEPTED, "k-2", robot_key="wms/k-2", command_type="dock", payload_json="{}"),
    ev(EventType.DISPATCHED, "k-1", disc="1", attempt=1),
    ev(EventType.RESULT, "k-1", state=3, status_code=200, result_json='{"ok": true}'),
    ev(EventType.ACCEPTED, "k-1", client="erp", robot_key="erp/k-1", command_type="place"),
    ev(EventType.ROBOT_OFFLINE, "", client="", disc="amr-1#1"),
]


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    """An LMDB log, for the tests of LMDB's files."""
    path = tmp_path / "log"
    with LmdbEventLog(EventLogConfig(path=path)) as log:
        log.append_many(SCENARIO)
    return path


@pytest.fixture
def log_where(log_backend: LogBackend) -> str:
    """The SCENARIO log on either backend: what the tool's --path takes."""
    with log_backend.open() as log:
        log.append_many(SCENARIO)
    return log_backend.where


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def sequences(out: str) -> list[int]:
    return [int(line.split("\t")[0]) for line in out.splitlines()]


def test_print_shows_one_line_per_event_with_filters(
    capsys: pytest.CaptureFixture[str], log_where: str
) -> None:
    code, out, _ = run(capsys, "--path", log_where, "print")
    assert code == EXIT_OK and sequences(out) == [1, 2, 3, 4, 5, 6]
    first = out.splitlines()[0].split("\t")
    assert first[:6] == ["1", "2023-11-14T22:13:20.000+00:00", "accepted", "wms", "k-1", "amr-1"]
    assert json.loads(first[7])["command_type"] == "pick"
    assert sequences(run(capsys, "--path", log_where, "print", "--key", "k-1")[1]) == [
        1,
        3,
        4,
        5,
    ]
    assert sequences(
        run(capsys, "--path", log_where, "print", "--key", "k-1", "--client", "wms")[1]
    ) == [1, 3, 4]
    assert sequences(run(capsys, "--path", log_where, "print", "--type", "ACCEPTED")[1]) == [
        1,
        2,
        5,
    ]
    assert sequences(run(capsys, "--path", log_where, "print", "--after", "4")[1]) == [5, 6]


def test_export_round_trips_and_replay_summarises(
    capsys: pytest.CaptureFixture[str], log_where: str, log_backend: LogBackend
) -> None:
    code, out, _ = run(capsys, "--path", log_where, "export")
    exported = [FleetEventRecord.from_dict(json.loads(line)) for line in out.splitlines()]
    with log_backend.open(readonly=True) as log:
        assert code == EXIT_OK and exported == list(log.read())
    _, out, _ = run(capsys, "--path", log_where, "export", "--after", "5")
    assert [json.loads(line)["sequence"] for line in out.splitlines()] == [6]
    code, out, _ = run(capsys, "--path", log_where, "replay")
    summary = json.loads(out)
    assert code == EXIT_OK and summary == replay(exported).summary()
    assert summary["states"]["completed"] == 1 and summary["in_flight"] == 2


def test_stats_are_name_value_lines(
    capsys: pytest.CaptureFixture[str], log_where: str, log_backend: LogBackend
) -> None:
    code, out, _ = run(capsys, "--path", log_where, "stats")
    stats = dict(line.split("=", 1) for line in out.splitlines())
    assert code == EXIT_OK and stats["events"] == "6" and stats["last_sequence"] == "6"
    size = "table_bytes" if log_backend.is_postgres else "file_bytes"
    assert int(stats[size]) > 0 and stats["schema_version"] == "1"


def test_path_from_the_environment(
    capsys: pytest.CaptureFixture[str], log_where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PATH_ENV, log_where)
    assert run(capsys, "stats")[0] == EXIT_OK


def test_the_tool_never_writes(capsys: pytest.CaptureFixture[str], log_path: Path) -> None:
    # LMDB only: compares the file's bytes; PostgreSQL sessions of the tool are read-only
    # on the server's side (default_transaction_read_only).
    data = log_path / "data.mdb"
    before = data.read_bytes()
    for command in (["print"], ["export"], ["replay"], ["stats"]):
        assert run(capsys, "--path", str(log_path), *command)[0] == EXIT_OK
    assert data.read_bytes() == before


def test_it_runs_while_the_orchestrator_holds_the_log_open(
    tmp_path: Path, log_where: str, log_backend: LogBackend
) -> None:
    with log_backend.open() as log:
        log.append(ev(EventType.ACCEPTED, "k-live"))
        tool = subprocess.run(
            [
                sys.executable,
                "-m",
                "fleet_idempotency.events.cli",
                "--path",
                log_where,
                "export",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=tmp_path,  # not the repo root: the installed package is imported
            check=False,
        )
        assert tool.returncode == EXIT_OK, tool.stderr
        assert json.loads(tool.stdout.splitlines()[-1])["key"] == "k-live"
        # The writer is not blocked by the reader that came and went.
        assert log.append(ev(EventType.ACCEPTED, "k-after"))[0].sequence == 8


def test_missing_path_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(capsys, "--path", str(tmp_path / "absent"), "print")
    assert code == EXIT_LOG_ERROR and "no event log at" in err
    monkeypatch.delenv(PATH_ENV, raising=False)
    code, _, err = run(capsys, "print")
    assert code == EXIT_USAGE and "--path" in err


def test_a_database_without_a_log_or_without_a_server_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    code, _, err = run(capsys, "--path", postgres_url, "print")
    assert code == EXIT_LOG_ERROR and "no event log in schema fleet_idem_events" in err
    code, _, err = run(capsys, "--path", postgres_url, "--schema", "Bad-Name", "print")
    assert code == EXIT_USAGE and "pg_schema" in err
    nobody = f"postgresql://fleet:secret@127.0.0.1:{free_port()}/fleet"
    code, _, err = run(capsys, "--path", nobody, "stats")
    assert code == EXIT_LOG_ERROR and "unavailable" in err and "Connection refused" in err
    assert "secret" not in err  # the password never reaches a message


def test_something_else_is_not_an_event_log(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # LMDB only: foreign files (PostgreSQL's foreign tables: test_event_log.py).
    IdempotencyStore.open(StoreConfig(path=tmp_path / "store")).close()
    code, _, err = run(capsys, "--path", str(tmp_path / "store"), "print")
    assert code == EXIT_LOG_ERROR and "not a fleet_idempotency event log" in err
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "data.mdb").write_bytes(b"junk" * 2000)
    code, _, err = run(capsys, "--path", str(tmp_path / "junk"), "stats")
    assert code == EXIT_LOG_ERROR and "readable LMDB" in err
    env = lmdb.open(str(tmp_path / "raw"))
    env.close()
    code, _, err = run(capsys, "--path", str(tmp_path / "raw"), "stats")
    assert code == EXIT_LOG_ERROR and "not a fleet_idempotency event log" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["print", "--type", "exploded"], "unknown event type 'exploded'"),
        (["print", "--after", "-1"], "expected an integer >= 0"),
        (["export", "--after", "many"], "expected an integer >= 0"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
# LMDB only: arguments are parsed before any log is opened.
def test_bad_arguments_are_usage_errors(
    capsys: pytest.CaptureFixture[str], log_path: Path, argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, "--path", str(log_path), *argv)
    assert code == EXIT_USAGE and message in err
