"""Starting and stopping server processes we own: by PID and process group, never by name."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessRecord:
    """Enough to find, verify and stop a process later, from another mqlab invocation."""

    pid: int
    pgid: int
    start_ticks: int  # /proc/PID/stat field 22: guards against PID reuse
    cmd: str

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "start_ticks": self.start_ticks,
            "cmd": self.cmd,
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> ProcessRecord:
        return cls(int(d["pid"]), int(d["pgid"]), int(d["start_ticks"]), str(d["cmd"]))  # type: ignore[call-overload]


def _start_ticks(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_alive(rec: ProcessRecord) -> bool:
    """The very process we started is still running (not a zombie, not a reused PID)."""
    try:
        stat = Path(f"/proc/{rec.pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] != "Z" and int(fields[19]) == rec.start_ticks


def children(rec: ProcessRecord) -> list[ProcessRecord]:
    """The live child processes of ``rec`` (empty if it is not running): servers such as
    PostgreSQL whose children leave the process group are found by parent PID."""
    if not is_alive(rec):
        return []
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == rec.pid:
            out.append(ProcessRecord(int(entry.name), int(fields[2]), int(fields[19]), "child"))
    return out


def spawn(
    cmd: list[str],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    user: int | None = None,
    group: int | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start ``cmd`` in a new session (its own process group), output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
        )
    rec = ProcessRecord(proc.pid, proc.pid, _start_ticks(proc.pid), " ".join(cmd))
    LOG.debug("started pid %d: %s", proc.pid, rec.cmd)
    return proc, rec


def stop(rec: ProcessRecord, timeout_s: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """Signal the process group ``rec.pgid``; SIGKILL it if still alive after ``timeout_s``."""
    if not is_alive(rec):
        _kill_group(rec.pgid, signal.SIGKILL)  # leftovers of the group, if any
        return
    _kill_group(rec.pgid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(rec.pid)
        if not is_alive(rec):
            break
        time.sleep(0.05)
    else:
        LOG.warning("pid %d did not stop in %.0f s; killing its group", rec.pid, timeout_s)
    _kill_group(rec.pgid, signal.SIGKILL)
    _reap(rec.pid)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports that were free a moment ago."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_open(host: str, port: int, timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
