"""The run archive on disk: directory naming, file names, listing runs and workers."""

from __future__ import annotations

import datetime as dt
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlab.archive.records import read_manifest, read_summary
from mqlab.errors import ArchiveError

MANIFEST = "manifest.json"
SCENARIO = "scenario.toml"
SUMMARY = "summary.json"
UNDRAINED = "undrained.json"  # what the broker still held after the receivers stopped
SUMMARY_DIR = "summary"  # Parquet tables of the summary
WORKERS = "workers"
WORKER = "worker.json"
COUNTS = "counts.csv"
CPU = "cpu.csv"  # per worker process, and per local broker node under BROKERS
BROKERS = "brokers"  # brokers/node-00/cpu.csv: a local broker node's process group
SENT = "sent.json"
DELIVERY = "delivery.json"
# interval logs per role: metric name -> file name is f"{metric}.hlog"
LOGS = {
    "sender": ("send_call_us", "send_msg_us", "send_failed_us"),
    "receiver": ("processing_us", "processing_first_us"),
}
METRICS = (*LOGS["sender"], *LOGS["receiver"])
ROLES = ("sender", "receiver")


def run_id(started: dt.datetime, scenario_name: str, label: str) -> str:
    return f"{started.astimezone(dt.UTC).strftime('%Y-%m-%dT%H-%M-%SZ')}_{scenario_name}_{label}"


def log_file(worker_dir: Path | str, metric: str) -> Path:
    return Path(worker_dir) / f"{metric}.hlog"


def broker_dir(run_dir: Path | str, node: int) -> Path:
    """Where a broker node's own records (its CPU) go: ``brokers/node-00``."""
    return Path(run_dir) / BROKERS / f"node-{node:02d}"


def broker_dirs(run_dir: Path | str) -> list[Path]:
    d = Path(run_dir) / BROKERS
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_dir() and p.name.startswith("node-"))


def worker_id(role: str, node: int, process: int = 0, processes: int = 1) -> str:
    """The id (and folder name) of a worker process: ``sender-03`` on a node that runs one
    process (as every run did before nodes ran several), ``sender-03-p01`` (process 1 of
    node 3) on a node that runs several. Two digits at least: ids sort by node, then
    process."""
    base = f"{role}-{node:02d}"
    return base if processes == 1 else f"{base}-p{process:02d}"


def parse_worker_id(wid: str) -> tuple[str, int | None, int]:
    """(role, node, process) of a worker id; node None when the id names none."""
    role, _, rest = wid.partition("-")
    node_text, _, proc_text = rest.partition("-p")
    node = int(node_text) if node_text.isdigit() else None
    process = int(proc_text) if proc_text.isdigit() else 0
    return role, node, process


def role_of(worker_id: str) -> str:
    """``sender-03`` (or ``sender-03-p01``) -> ``sender``."""
    return worker_id.split("-", 1)[0]


def is_run_dir(path: Path | str) -> bool:
    return (Path(path) / MANIFEST).is_file()


def find_runs(results_dir: Path | str) -> list[Path]:
    """Every run directory directly under ``results_dir``, oldest first."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ArchiveError(f"{root}: no such results directory")
    return sorted(p for p in root.iterdir() if p.is_dir() and is_run_dir(p))


def worker_dirs(run_dir: Path | str, role: str | None = None) -> list[Path]:
    d = Path(run_dir) / WORKERS
    if not d.is_dir():
        return []
    return sorted(
        p for p in d.iterdir() if p.is_dir() and (role is None or role_of(p.name) == role)
    )


@dataclass(frozen=True)
class RunInfo:
    """What `mqlab ls` shows of a run: its manifest, scenario and summary as stored."""

    path: Path
    run_id: str
    manifest: dict[str, Any]
    scenario: dict[str, Any]
    summary: dict[str, Any] | None

    @property
    def broker(self) -> str:
        return str(self.scenario.get("broker", "?"))

    @property
    def scenario_name(self) -> str:
        return str(self.scenario.get("name", "?"))

    @property
    def started_at(self) -> str:
        return str(self.manifest.get("started_at", ""))


def read_scenario(run_dir: Path | str) -> dict[str, Any]:
    path = Path(run_dir) / SCENARIO
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ArchiveError(f"{path}: unreadable ({e})") from None


def load_run(path: Path | str) -> RunInfo:
    path = Path(path)
    if not is_run_dir(path):
        raise ArchiveError(f"{path}: not a run directory (no {MANIFEST})")
    manifest = read_manifest(path / MANIFEST).raw
    summary = read_summary(path / SUMMARY).raw if (path / SUMMARY).is_file() else None
    return RunInfo(path, path.name, manifest, read_scenario(path), summary)


def list_runs(results_dir: Path | str) -> list[RunInfo]:
    """Every run under ``results_dir`` (oldest first); none if the directory is missing."""
    if not Path(results_dir).is_dir():
        return []
    return [load_run(p) for p in find_runs(results_dir)]
