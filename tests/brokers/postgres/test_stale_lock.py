"""A restarted PostgreSQL node is not refused for the zombie of its killed postmaster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from mqlab.brokers.postgres.cluster import PostgresCluster
from mqlab.hosts.local import LocalHost


def _node(tmp_path: Path) -> SimpleNamespace:
    host = LocalHost("broker-0", "127.0.0.1", tmp_path)
    return SimpleNamespace(_data=lambda _i: tmp_path, host=lambda _i: host)


def _clear(node: SimpleNamespace) -> None:
    PostgresCluster._clear_stale_lock(node, 0)  # type: ignore[arg-type]


def test_the_lock_of_a_zombie_or_gone_postmaster_is_removed(tmp_path: Path) -> None:
    pidfile = tmp_path / "postmaster.pid"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] != "Z":
        pass  # exited, not reaped: a zombie, as a killed postmaster is until init reaps it
    pidfile.write_text(f"{child.pid}\n/data\n")
    _clear(_node(tmp_path))
    assert not pidfile.exists()
    child.wait()  # reaped: the PID is gone altogether
    pidfile.write_text(f"{child.pid}\n/data\n")
    _clear(_node(tmp_path))
    assert not pidfile.exists()


def test_the_lock_of_a_live_process_stays(tmp_path: Path) -> None:
    pidfile = tmp_path / "postmaster.pid"
    pidfile.write_text(f"{os.getpid()}\n/data\n")
    _clear(_node(tmp_path))
    assert pidfile.exists()
    pidfile.unlink()
    _clear(_node(tmp_path))  # no lock file: nothing to do
    assert not pidfile.exists()
