"""This machine's side of a lab: root and tools, ``ip`` commands, namespaces, links and
the processes inside them."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from mqlab.errors import FleetError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord
from mqlab.labs.netns.plan import (
    CMD_TIMEOUT_S,
    KILL_WAIT_S,
    PACKAGES,
    ROOT_MESSAGE,
    SSHD,
    STOP_TIMEOUT_S,
)

LOG = logging.getLogger(__name__)


# -- environment checks ---------------------------------------------------------------------
def require_root() -> None:
    if os.geteuid() != 0:
        raise FleetError(ROOT_MESSAGE)


def require_tools(netem: bool) -> None:
    for tool in ["ip", SSHD, "ssh-keygen"] + (["tc"] if netem else []):
        require_tool(tool)


def require_tool(tool: str) -> None:
    if shutil.which(tool) is None:
        raise FleetError(
            f"mqlab lab needs `{tool}`: install the Debian package {PACKAGES[tool]} "
            f"(apt-get install {PACKAGES[tool]})"
        )


def run(cmd: list[str], timeout_s: float = CMD_TIMEOUT_S) -> str:
    """Run ``cmd``; its stdout. Failures become a FleetError naming the command and its stderr."""
    LOG.debug("run: %s", shlex.join(cmd))
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        package = PACKAGES.get(cmd[0], "")
        hint = f": install the Debian package {package}" if package else ""
        raise FleetError(f"`{cmd[0]}` not found{hint}") from None
    except subprocess.TimeoutExpired:
        raise FleetError(f"`{shlex.join(cmd)}` did not finish in {timeout_s:g} s") from None
    if out.returncode != 0:
        err = " ".join(out.stderr.split()) or f"exit code {out.returncode}"
        raise FleetError(f"`{shlex.join(cmd)}` failed: {err}")
    return out.stdout


def ip_json(*args: str) -> list[dict[str, Any]]:
    text = run(["ip", "-j", *args]).strip()
    value = json.loads(text) if text else []
    return value if isinstance(value, list) else []


def namespaces() -> list[str]:
    return [str(n["name"]) for n in ip_json("netns", "list") if "name" in n]


def links() -> list[dict[str, Any]]:
    return ip_json("link", "show")


def ns_pids(ns: str) -> list[int]:
    try:
        out = run(["ip", "netns", "pids", ns])
    except FleetError:
        return []  # the namespace is gone
    return [int(p) for p in out.split() if p.isdigit()]


def alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child (sshd started in this process)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def end_processes(namespaces: list[str], records: list[ProcessRecord]) -> None:
    """SIGTERM every process in the namespaces (and the recorded sshds), SIGKILL after 5 s."""
    me = os.getpid()

    def current() -> set[int]:
        pids = {r.pid for r in records if process.is_alive(r)}
        for ns in namespaces:
            pids.update(ns_pids(ns))
        pids.discard(me)
        return {p for p in pids if alive(p)}

    signalled: set[int] = set()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    pids = current()
    while pids and time.monotonic() < deadline:
        for pid in pids - signalled:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            signalled.add(pid)
        time.sleep(0.05)
        pids = current()
    if pids:
        LOG.warning(
            "processes %s did not end on SIGTERM within %.0f s: SIGKILL", pids, STOP_TIMEOUT_S
        )
    kill_deadline = time.monotonic() + KILL_WAIT_S
    while pids and time.monotonic() < kill_deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
        pids = current()
    for pid in signalled:
        alive(pid)  # reap
    if pids:
        raise FleetError(f"processes {sorted(pids)} of the lab did not end even on SIGKILL")
