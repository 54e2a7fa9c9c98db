"""Integration fixtures: an isolated mqlab state dir, and a check that nothing is left running."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """(pid, cmdline) of live processes whose command line contains ``text`` (read-only scan)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "cmdline").read_bytes()
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace")
        if text in cmd:
            found.append((int(entry.name), cmd))
    return found


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """MQLAB_STATE_DIR for this test; afterwards no process may still run from it."""
    d = tmp_path / "state"
    d.mkdir()
    monkeypatch.setenv("MQLAB_STATE_DIR", str(d))
    yield d
    leftovers = processes_mentioning(str(d))
    assert not leftovers, f"processes left running: {leftovers}"
