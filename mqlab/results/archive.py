"""The run archive on disk: naming, listing, reading (see docs/archive-format.md)."""

from __future__ import annotations

import datetime as dt
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlab.errors import ArchiveError

FORMAT_VERSION = 1
ACCEPTED_VERSIONS = (1,)


def run_id(started: dt.datetime, scenario_name: str, label: str) -> str:
    return f"{started.astimezone(dt.UTC).strftime('%Y-%m-%dT%H-%M-%SZ')}_{scenario_name}_{label}"


def read_json(path: Path, accepted: tuple[int, ...] = ACCEPTED_VERSIONS) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArchiveError(f"{path}: missing") from None
    except (OSError, ValueError) as e:
        raise ArchiveError(f"{path}: unreadable ({e})") from None
    v = data.get("format_version")
    if v not in accepted:
        raise ArchiveError(
            f"{path}: format_version {v!r} not supported (this mqlab reads {accepted})"
        )
    return data


@dataclass(frozen=True)
class RunInfo:
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


def is_run_dir(path: Path) -> bool:
    return (path / "manifest.json").is_file()


def load_run(path: Path) -> RunInfo:
    path = Path(path)
    if not is_run_dir(path):
        raise ArchiveError(f"{path}: not a run directory (no manifest.json)")
    manifest = read_json(path / "manifest.json")
    try:
        scenario = tomllib.loads((path / "scenario.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ArchiveError(f"{path / 'scenario.toml'}: unreadable ({e})") from None
    summary = read_json(path / "summary.json") if (path / "summary.json").is_file() else None
    return RunInfo(path, path.name, manifest, scenario, summary)


def list_runs(results_dir: Path) -> list[RunInfo]:
    """Every run directory directly under ``results_dir``, oldest first."""
    if not results_dir.is_dir():
        return []
    return [load_run(p) for p in sorted(results_dir.iterdir()) if p.is_dir() and is_run_dir(p)]


def worker_dirs(run_dir: Path, role: str | None = None) -> list[Path]:
    d = run_dir / "workers"
    if not d.is_dir():
        return []
    return sorted(
        p for p in d.iterdir() if p.is_dir() and (role is None or p.name.startswith(role))
    )
