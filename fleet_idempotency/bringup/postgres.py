"""A throwaway PostgreSQL server: Debian's binaries, a temporary data directory, a free port.

For tests, benches and ``fleet-idem demo --replicas`` on a machine with no database
running. PostgreSQL refuses to run as root, so as root the server runs as an
unprivileged user (``nobody`` unless told otherwise) that owns the data directory.
Nothing here is for production: trust authentication, loopback only.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from fleet_idempotency.bringup.system_tools import POSTGRES

DATABASE = "fleet_idem"
SUPERUSER = "fleet_idem"
_START_TIMEOUT_S = 60.0


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries here, or the server would not start."""


def find_binaries() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres`` (newest version first)."""
    folder = POSTGRES.find().resolve().parent
    if not all(os.access(folder / tool, os.X_OK) for tool in ("initdb", "pg_ctl")):
        raise PostgresUnavailable(f"{folder} has postgres but not initdb and pg_ctl")
    return folder


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def runuser_path() -> str:
    """util-linux's runuser, which lives in sbin: not on every root PATH (``env -i``, cron,
    a CI runner's minimal environment)."""
    found = shutil.which("runuser") or next(
        (path for path in ("/usr/sbin/runuser", "/sbin/runuser") if os.access(path, os.X_OK)),
        None,
    )
    if found is None:
        raise PostgresUnavailable("runuser (util-linux) is needed to run PostgreSQL as root")
    return found


class LocalPostgres:
    """``with LocalPostgres() as db: db.url`` — started on enter, stopped and removed on exit."""

    def __init__(self, *, run_as: str = "nobody", root: Path | None = None) -> None:
        self.binaries = find_binaries()
        self._run_as = run_as if os.geteuid() == 0 else None
        self._owns_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="fleet-idem-pg-")) if root is None else root
        self.data_dir = self.root / "data"
        self.log_file = self.root / "server.log"
        self.port = 0

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binaries / command[0]), *command[1:]]
        if self._run_as is not None:
            argv = [runuser_path(), "-u", self._run_as, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> Self:
        """Create the cluster on the first start; (re)start the server on a free port."""
        if self._run_as is not None:
            # The server user must reach its folder: a 0700 parent (pytest's) would stop it.
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, user=self._run_as)
        if not self.data_dir.exists():
            try:
                self._run(
                    "initdb", "-D", str(self.data_dir), "-U", SUPERUSER,
                    "--auth=trust", "--encoding=UTF8", "--no-instructions",
                )  # fmt: skip
            except subprocess.CalledProcessError as error:
                raise PostgresUnavailable(f"initdb failed: {error.stderr.strip()}") from error
        for _attempt in range(5):
            self.port = free_port()
            if self._start_server().returncode == 0:
                break
        else:
            raise PostgresUnavailable(f"pg_ctl start failed: {self.server_log()[-2000:]}")
        self._ensure_database()
        return self

    def _ensure_database(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            created = self._run(
                "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER, DATABASE,
                check=False,
            )  # fmt: skip
            if created.returncode == 0 or "already exists" in created.stderr:
                return
            if time.monotonic() > deadline:
                raise PostgresUnavailable(f"createdb failed: {created.stderr.strip()}")
            time.sleep(0.2)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is a crash: no shutdown checkpoint)."""
        if (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again on the same port: clients' URLs stay valid."""
        self.stop(mode)
        self.start_again()

    def start_again(self) -> None:
        """Start a stopped server on the port it had."""
        started = self._start_server()
        if started.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl start failed: {self.server_log()[-2000:]}")

    def _start_server(self) -> subprocess.CompletedProcess[str]:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c max_connections=200 -c shared_buffers=32MB"
        )
        return self._run(
            "pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file),
            "-o", options, "-w", "-t", str(int(_START_TIMEOUT_S)), "start",
            check=False,
        )  # fmt: skip

    def server_log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        self.stop("immediate")
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
