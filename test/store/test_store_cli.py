"""The operator CLI: read-only by default, works while the agent holds the store open."""

from __future__ import annotations

import io
import json
from pathlib import Path

from fleet_idempotency.store import IdempotencyStore, State
from fleet_idempotency.store.cli import main

from support.store_support import ROBOT, claim_args, make_config, read_line, spawn_child


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _populated(path: Path) -> None:
    with IdempotencyStore.open(make_config(path)) as store:
        store.claim(**claim_args("done-1"))
        store.finish(
            ROBOT, "done-1", state=State.COMPLETED, status_code=200, result_json='{"ok": true}'
        )
        store.claim(**claim_args("move-1", command_type="move_to_waypoint", waypoint="W3"))


def test_list_filters_by_state_and_type(tmp_path: Path) -> None:
    _populated(tmp_path / "s")
    code, out, _ = run("--path", str(tmp_path / "s"), "list")
    assert code == 0 and "done-1" in out and "move-1" in out
    _, out, _ = run("--path", str(tmp_path / "s"), "list", "--state", "completed")
    assert "done-1" in out and "move-1" not in out
    _, out, _ = run("--path", str(tmp_path / "s"), "list", "--type", "move_to_waypoint")
    assert "move-1" in out and "done-1" not in out
    _, out, _ = run("--path", str(tmp_path / "s"), "list", "--older-than", "3600")
    assert out == ""


def test_show_export_and_stats(tmp_path: Path) -> None:
    _populated(tmp_path / "s")
    code, out, _ = run("--path", str(tmp_path / "s"), "show", "done-1")
    shown = json.loads(out)
    assert code == 0 and shown["state"] == "COMPLETED" and shown["result_json"] == '{"ok": true}'
    code, _, err = run("--path", str(tmp_path / "s"), "show", "absent", "--scope", ROBOT)
    assert code == 1 and "not found" in err
    code, out, _ = run("--path", str(tmp_path / "s"), "export")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and {line["key"] for line in lines} == {"done-1", "move-1"}
    code, out, _ = run("--path", str(tmp_path / "s"), "stats")
    assert code == 0 and "records=2" in out.splitlines()


def test_read_only_commands_never_write(tmp_path: Path) -> None:
    _populated(tmp_path / "s")
    data = tmp_path / "s" / "data.mdb"
    before = data.read_bytes()
    for command in (["list"], ["show", "done-1"], ["stats"], ["export"]):
        assert run("--path", str(tmp_path / "s"), *command)[0] == 0
    assert data.read_bytes() == before


def test_gc_is_the_writing_command_and_says_so(tmp_path: Path) -> None:
    _populated(tmp_path / "s")
    code, out, err = run("--path", str(tmp_path / "s"), "gc")
    assert code == 0 and "writes" in err and "records_purged=0" in out


def test_works_while_an_agent_process_holds_the_store(tmp_path: Path) -> None:
    path = tmp_path / "s"
    agent = spawn_child("claim_and_hold", str(path), "live-1")
    while read_line(agent) != "ready":
        pass
    try:
        code, out, _ = run("--path", str(path), "list", "--state", "in_progress")
        assert code == 0 and "live-1" in out
        assert run("--path", str(path), "gc")[0] == 0
    finally:
        agent.kill()
        agent.wait(10)


def test_bad_input_gives_clear_errors_and_nonzero_exit(tmp_path: Path) -> None:
    code, _, err = run("--path", str(tmp_path / "missing"), "list")
    assert code == 3 and "no store" in err
    assert not (tmp_path / "missing").exists()
    _populated(tmp_path / "s")
    assert run("--path", str(tmp_path / "s"), "list", "--state", "sleeping")[0] == 2
    assert run("--path", str(tmp_path / "s"), "list", "--older-than", "-5")[0] == 2
    assert run("--path", str(tmp_path / "s"), "frobnicate")[0] == 2
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "data.mdb").write_bytes(b"junk" * 2000)
    code, _, err = run("--path", str(tmp_path / "junk"), "stats")
    assert code == 3 and "LMDB" in err
