"""Shared test fixtures (every integration test): an isolated mqlab state
dir, the session's shared local clusters, a check that nothing is left running, and a run
under faults."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqlab.archive.formats import read_json
from mqlab.brokers import local
from mqlab.brokers.cluster import LocalCluster


def ctrl_c_able() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT, as Ctrl-C would.

    A non-interactive shell starts background commands (``cmd &``) with SIGINT ignored,
    children inherit that, and Python keeps an inherited SIG_IGN: the child restores the
    default so that SIGINT raises KeyboardInterrupt in it, as at a terminal.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class CountingCondition(threading.Condition):
    """A Condition that counts its ``notify_all`` calls: the wake-ups a test expects."""

    def __init__(self) -> None:
        super().__init__()
        self.wakeups = 0

    def notify_all(self) -> None:
        self.wakeups += 1
        super().notify_all()


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


class SharedLab:
    """Named local clusters shared by the whole test session (started on first use).

    Its directory is a real mqlab state dir: a test that points MQLAB_STATE_DIR at
    it runs `mqlab run` against these clusters (the "already up" path)."""

    def __init__(self, root: Path):
        self.root = root
        self.started: list[str] = []

    def cluster(self, broker: str, nodes: int | None = None) -> LocalCluster:
        running = local.find_running(broker, self.root)
        if running is not None:
            return running
        cluster = local.up(broker, nodes, root=self.root)
        self.started.append(broker)
        return cluster

    def close(self) -> None:
        for broker in self.started:
            local.down(broker, self.root)


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedLab]:
    lab = SharedLab(tmp_path_factory.mktemp("shared-state"))
    try:
        yield lab
    finally:
        lab.close()
    leftovers = processes_mentioning(str(lab.root))
    assert not leftovers, f"processes left running: {leftovers}"


def run_under_faults(
    tmp_path: Path,
    name: str,
    profile: str,
    faults: list[dict[str, Any]],
    *,
    duration_s: float,
    rate_per_s: int | None = 100,
    threads: int = 2,
    message_bytes: int = 512,
    warmup_s: float = 2,
    nodes: int = 3,
    workload: dict[str, Any] | None = None,
) -> Any:
    """Write a scenario with ``faults`` (fixed rate per sender thread, or closed loop with
    ``rate_per_s=None``; 1 sender node, 1 receiver node, on the local cluster) and run it
    in this process; the run's result."""
    import json

    from mqlab.run import sweep

    def table(d: dict[str, Any]) -> str:
        return "".join(f"{k} = {json.dumps(v)}\n" for k, v in d.items())

    rate: dict[str, Any] = {"mode": "closed_loop"} if rate_per_s is None else {"mode": "fixed_rate"}
    if rate_per_s is not None:
        rate["rate_per_s"] = rate_per_s
    w = {
        "message_bytes": message_bytes,
        **rate,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        **(workload or {}),
    }
    text = (
        f'format_version = 1\nname = "{name}"\nprofile = "{profile}"\n'
        f"[cluster]\nnodes = {nodes}\n[workload]\n{table(w)}"
        # one worker process per node: the load these fault tests are calibrated for
        f"[clients]\nsender_nodes = 1\nreceiver_nodes = 1\nthreads = {threads}\n"
        "processes_per_node = 1\n" + "".join(f"[[faults]]\n{table(f)}" for f in faults)
    )
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    [result] = sweep.execute_files([path], tmp_path / "results")
    return result


def run_story(result: Any) -> str:
    """Why a run is not complete: its end reason and each worker's status and error."""
    lines = [f"end_reason={result.end_reason}"]
    for record in sorted((result.run_dir / "workers").glob("*/worker.json")):
        w = read_json(record)
        lines.append(f"{w['worker_id']}: {w['status']} {w.get('error')}")
    return "; ".join(lines)
