"""The programs from Debian packages: the set-up installs what the main job starts, and a
missing one is one line naming its package, exit code 1, nothing started.

CI runs the test set-up, which installs every package, so a missing program is made here by
hiding it in a mount namespace of the command's own (root only): the real script and the
real ``fleet-idem`` meet a machine without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fleet_idempotency.bringup.cli import build_parser, system_tools_of
from fleet_idempotency.bringup.system_tools import (
    MOSQUITTO,
    POSTGRES,
    MissingSystemTool,
    SystemTool,
)

from support.paths import REPO

FLEET_IDEM = Path(sys.prefix) / "bin" / "fleet-idem"
needs_root_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="hiding a program needs root and unshare (util-linux) for a private mount namespace",
)


def setup_packages(*options: str) -> set[str]:
    listed = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh"), *options, "--list-debian-packages"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return set(listed.stdout.split())


def test_the_default_set_up_installs_every_package_the_default_demo_and_up_start() -> None:
    parser = build_parser()
    needed = {
        command: {tool.debian_package for tool in system_tools_of(parser.parse_args([command]))}
        for command in ("demo", "up")
    }
    # The default demo's fleet has VDA 5050 vehicles: without this the check proves nothing.
    assert "mosquitto" in needed["demo"]
    installed_by_default = setup_packages()
    for command, packages in needed.items():
        assert packages <= installed_by_default, (
            f"`fleet-idem {command}` starts programs from {sorted(packages)}; "
            f"scripts/setup.sh without --test installs only {sorted(installed_by_default)}"
        )
    # The test set-up is a superset: what CI sees is never less than what users get.
    assert installed_by_default <= setup_packages("--test")


def test_replicas_without_a_database_url_need_postgresql_and_with_one_do_not() -> None:
    parser = build_parser()
    local = system_tools_of(parser.parse_args(["demo", "--replicas", "2"]))
    external = system_tools_of(
        parser.parse_args(["demo", "--replicas", "2", "--store-url", "postgresql://db/x"])
    )
    assert POSTGRES in local
    assert POSTGRES not in external


def hidden(
    paths: list[Path], argv: list[str], **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` where each of ``paths`` is covered: a file by /dev/null (not executable),
    a folder by an empty tmpfs. The covering dies with the namespace."""
    covers = " && ".join(
        f"mount -t tmpfs none '{path}'" if path.is_dir() else f"mount --bind /dev/null '{path}'"
        for path in paths
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
         f'{covers} && exec "$@"', "hide", *argv],
        capture_output=True, text=True, timeout=120, check=False, **kwargs,
    )  # fmt: skip


def assert_one_line_naming(run: subprocess.CompletedProcess[str], package: str) -> None:
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert f"apt-get install {package}" in lines[0]
    assert "Traceback" not in run.stdout + run.stderr


@needs_root_namespaces
def test_demo_without_mosquitto_is_one_line_naming_the_package_and_starts_nothing(
    tmp_path: Path,
) -> None:
    run = hidden(
        [MOSQUITTO.find()],
        [str(FLEET_IDEM), "demo", "--store-dir", str(tmp_path / "demo")],
        cwd=tmp_path,
    )
    assert_one_line_naming(run, "mosquitto")
    assert run.stderr.startswith("fleet-idem demo: mosquitto (the MQTT broker")
    assert run.stdout == ""
    assert not (tmp_path / "demo").exists()


@needs_root_namespaces
def test_replicas_without_postgresql_are_one_line_naming_the_package(tmp_path: Path) -> None:
    run = hidden(
        [POSTGRES.find().parents[2]],  # /usr/lib/postgresql: every version
        [str(FLEET_IDEM), "demo", "--replicas", "2", "--no-http"],
        cwd=tmp_path,
    )
    assert_one_line_naming(run, "postgresql")


@needs_root_namespaces
def test_setup_as_a_user_without_mosquitto_stops_with_one_line_naming_it() -> None:
    # A copy of what the script reads before it installs anything, where `nobody` reads it
    # (pytest's tmp_path is root's alone).
    copy = Path(tempfile.mkdtemp(prefix="fleet-idem-setup-"))
    try:
        copy.chmod(0o755)
        for relative in ("scripts/setup.sh", "env/debian-packages.txt"):
            (copy / relative).parent.mkdir(exist_ok=True)
            shutil.copy(REPO / relative, copy / relative)
        run = hidden(
            [MOSQUITTO.find()],
            ["runuser", "-u", "nobody", "--", "bash", str(copy / "scripts" / "setup.sh")],
        )
    finally:
        shutil.rmtree(copy)
    assert_one_line_naming(run, "mosquitto")
    assert "missing mosquitto" in run.stderr


def test_a_missing_program_names_its_package_and_the_set_up() -> None:
    absent = SystemTool("not-a-real-broker", "some-package", "a test's broker")
    with pytest.raises(MissingSystemTool) as missing:
        absent.find()
    assert str(missing.value) == (
        "not-a-real-broker (a test's broker) is not installed: install the Debian package "
        "some-package (sudo apt-get install some-package; scripts/setup.sh does it when run "
        "as root)"
    )
