"""Identity of the process that owns an in-flight claim, robust to pid reuse.

A pid alone is not an identity: after a reboot or a long uptime the pid of a dead agent
can belong to an unrelated process, which would make its claims look alive forever. The
boot id pins the boot, the start time (clock ticks since boot) pins the process.
"""

from __future__ import annotations

import os
from pathlib import Path

_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
_UNKNOWN_BOOT = "noboot"


def _boot_id() -> str:
    try:
        return _BOOT_ID_PATH.read_text().strip() or _UNKNOWN_BOOT
    except OSError:
        return _UNKNOWN_BOOT


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may contain ')' or spaces)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _start_time(pid: int) -> str | None:
    fields = _stat_fields(pid)
    # Field 22 of stat is starttime; index 19 once pid and comm are stripped.
    return fields[19] if fields is not None and len(fields) > 19 else None


def owner_of(pid: int) -> str | None:
    start = _start_time(pid)
    return None if start is None else f"{_boot_id()}/{pid}/{start}"


def current_owner() -> str:
    """Owner id of this process: "<boot id>/<pid>/<start time>"."""
    pid = os.getpid()
    return owner_of(pid) or f"{_boot_id()}/{pid}/0"


def is_alive(owner: str) -> bool:
    """True when the process named by ``owner`` still runs (same boot, pid, start time)."""
    boot, _, rest = owner.partition("/")
    pid_text, _, start = rest.partition("/")
    if boot != _boot_id() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    fields = _stat_fields(pid)
    if fields is None:
        if start == "0":  # no /proc: fall back to a plain existence probe
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        return False
    # A zombie has exited: it will never finish its command even if not yet reaped.
    if fields[0] in {"Z", "X"}:
        return False
    return len(fields) > 19 and fields[19] == start
