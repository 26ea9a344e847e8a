"""A throwaway MQTT broker: Debian's ``mosquitto``, a temporary directory, a free port.

For the VDA 5050 tests, benches and ``fleet-idem up``/``demo`` of a fleet with VDA 5050
vehicles, on a machine with no broker running. The broker listens on loopback only,
with a configuration of its own (nothing of ``/etc/mosquitto`` is read) and, when given
credentials, refuses anonymous clients and checks a password file made with
``mosquitto_passwd``. Started as root, mosquitto drops its privileges to its own
``mosquitto`` user (Debian's package creates it): the temporary directory is made
readable for it. With ``tls=True`` the listener speaks TLS only, with a server certificate
for 127.0.0.1 signed by a CA made for this broker alone (``ca_file``), both made with
Debian's ``openssl``. Nothing here is for production: throwaway keys, no persistence.
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

from fleet_idempotency.bringup.system_tools import MOSQUITTO, MOSQUITTO_PASSWD, OPENSSL
from fleet_idempotency.http.ports import PortLease

_START_TIMEOUT_S = 20.0
_STOP_TIMEOUT_S = 10.0
# Long enough for any test run, short enough that a leaked CA is soon worthless.
_CERT_DAYS = 2


class MosquittoUnavailable(RuntimeError):
    """The broker would not start (a missing package is ``MissingSystemTool``)."""


def mosquitto_available() -> bool:
    return MOSQUITTO.available() and MOSQUITTO_PASSWD.available()


def tls_available() -> bool:
    """``LocalMosquitto(tls=True)`` can start here (it also needs ``openssl``)."""
    return mosquitto_available() and OPENSSL.available()


class LocalMosquitto:
    """``with LocalMosquitto(username="u", password="p") as broker: broker.port`` — started
    on enter, stopped and its directory removed on exit. ``restart`` keeps the port, so
    clients reconnect to the same address (a broker restart mid-order). ``tls``: clients
    must speak TLS and trust ``ca_file`` (written by ``start``, kept across restarts)."""

    host = "127.0.0.1"

    def __init__(
        self,
        *,
        username: str = "",
        password: str = "",
        root: Path | None = None,
        tls: bool = False,
    ) -> None:
        if bool(username) != bool(password):
            raise ValueError("give both a username and a password, or neither")
        self.binary = MOSQUITTO.find()
        self._passwd_binary = MOSQUITTO_PASSWD.find() if username else None
        self._openssl = OPENSSL.find() if tls else None
        self.username = username
        self.password = password
        self._owns_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="fleet-idem-mqtt-")) if root is None else root
        self.config_file = self.root / "mosquitto.conf"
        self.password_file = self.root / "passwd"
        self.log_file = self.root / "broker.log"
        self.ca_file: Path | None = self.root / "ca.crt" if tls else None
        self.cert_file = self.root / "server.crt"
        self.key_file = self.root / "server.key"
        self.port = 0
        self._port_lease: PortLease | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # --- life cycle -------------------------------------------------------------------------
    def start(self) -> Self:
        """Write the configuration and start the broker on a free port."""
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chmod(self.root, 0o755)  # the broker's own user reads its files here
        if self._passwd_binary is not None:
            self._write_password_file()
        if self._openssl is not None:
            self._make_certificates()
        last_error = ""
        for _attempt in range(5):
            # Leased until close(): a restart finds its port still free of our other runs.
            self._port_lease = PortLease(self.host)
            self.port = self._port_lease.port
            self._write_config()
            try:
                self._launch()
                return self
            except MosquittoUnavailable as error:  # the port was taken meanwhile: try another
                self._port_lease.release()
                last_error = str(error)
        raise MosquittoUnavailable(last_error)

    def _write_password_file(self) -> None:
        assert self._passwd_binary is not None
        self.password_file.unlink(missing_ok=True)
        made = subprocess.run(
            [str(self._passwd_binary), "-b", "-c", str(self.password_file),
             self.username, self.password],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if made.returncode != 0:
            raise MosquittoUnavailable(f"mosquitto_passwd failed: {made.stderr.strip()}")
        os.chmod(self.password_file, 0o644 if os.geteuid() == 0 else 0o600)

    def _make_certificates(self) -> None:
        """A CA of this broker's own, and its server certificate for 127.0.0.1/localhost."""
        assert self.ca_file is not None
        ca_key = self.root / "ca.key"
        request = self.root / "server.csr"
        extensions = self.root / "server.ext"
        extensions.write_text(
            "basicConstraints = critical, CA:FALSE\n"
            "keyUsage = critical, digitalSignature\n"  # ECDSA: the key only signs
            "extendedKeyUsage = serverAuth\n"
            "subjectAltName = IP:127.0.0.1, DNS:localhost\n"
            "subjectKeyIdentifier = hash\n"
            "authorityKeyIdentifier = keyid\n"
        )
        new_ec_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        self._openssl_run(
            "req", "-x509", *new_ec_key, "-keyout", str(ca_key), "-out", str(self.ca_file),
            "-days", str(_CERT_DAYS), "-subj", "/CN=fleet-idem throwaway test CA",
            "-addext", "basicConstraints = critical, CA:TRUE",
            "-addext", "keyUsage = critical, keyCertSign, cRLSign",
        )  # fmt: skip
        self._openssl_run(
            "req", "-new", *new_ec_key, "-keyout", str(self.key_file), "-out", str(request),
            "-subj", "/CN=localhost",
        )  # fmt: skip
        self._openssl_run(
            "x509", "-req", "-in", str(request), "-CA", str(self.ca_file), "-CAkey", str(ca_key),
            "-CAcreateserial", "-days", str(_CERT_DAYS), "-extfile", str(extensions),
            "-out", str(self.cert_file),
        )  # fmt: skip
        if os.geteuid() == 0:
            # The broker reads its key as the ``mosquitto`` user, after dropping root. World
            # readable is acceptable here: the key is made for this one broker, certifies
            # loopback only, for a CA nobody else trusts, and goes with the directory.
            os.chmod(self.key_file, 0o644)

    def _openssl_run(self, *arguments: str) -> None:
        assert self._openssl is not None
        made = subprocess.run(
            [str(self._openssl), *arguments],
            capture_output=True, text=True, timeout=60, check=False, cwd=self.root,
        )  # fmt: skip
        if made.returncode != 0:
            raise MosquittoUnavailable(f"openssl {arguments[0]} failed: {made.stderr.strip()}")

    def _write_config(self) -> None:
        lines = [
            f"listener {self.port} {self.host}",
            "persistence false",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "max_keepalive 60",
        ]
        if self._passwd_binary is not None:
            lines += ["allow_anonymous false", f"password_file {self.password_file}"]
        else:
            lines += ["allow_anonymous true"]
        if self.ca_file is not None:
            lines += [
                f"cafile {self.ca_file}",
                f"certfile {self.cert_file}",
                f"keyfile {self.key_file}",
                "tls_version tlsv1.2",  # the oldest accepted (mosquitto 2)
            ]
        self.config_file.write_text("\n".join(lines) + "\n")

    def _launch(self) -> None:
        log = self.log_file.open("ab")
        try:
            self._process = subprocess.Popen(
                [str(self.binary), "-c", str(self.config_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C is the owner's to forward
            )
        finally:
            log.close()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise MosquittoUnavailable(
                    f"mosquitto exited with {self._process.returncode}: {self.log()[-1500:]}"
                )
            if self._accepts():
                return
            time.sleep(0.02)
        self.stop()
        raise MosquittoUnavailable(f"mosquitto did not listen within {_START_TIMEOUT_S:.0f} s")

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process is not None else None

    def stop(self, *, kill: bool = False) -> None:
        """Stop the broker (``kill``: SIGKILL, a crash); its clients see the connection drop."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self, *, kill: bool = False, down_s: float = 0.0) -> None:
        """Stop and start again on the same port (``down_s``: stay down that long)."""
        self.stop(kill=kill)
        if down_s > 0:
            time.sleep(down_s)
        # The port was ours a moment ago; another process taking it now is an error.
        self._launch()

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        self.stop()
        if self._port_lease is not None:
            self._port_lease.release()
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
