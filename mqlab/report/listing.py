"""What `mqlab ls` lists: every run directory (readable or not), filters, and the
figures of each run's ``summary.json``. A run on a lab with a price per hour shows its
cost and its cost per million messages delivered; other runs leave those cells empty."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlab.analysis.inplace import find_all_runs, folder_of
from mqlab.analysis.saturation import marks
from mqlab.archive import layout
from mqlab.archive.formats import ACCEPTED_VERSIONS, V1_FIX
from mqlab.archive.layout import RunInfo
from mqlab.errors import ArchiveError, MqlabError
from mqlab.report import unknown

NOT_SUMMARIZED = "–"
COLUMNS = (
    "Run",
    "Folder",
    "Broker",
    "Scenario",
    "Status",
    "Send msgs/s",
    "Receive msgs/s",
    "Lost",
    "Undrained",
    "Cost",  # "$cost ($per million delivered/M)"; empty for a lab without a price
)


@dataclass(frozen=True)
class Listed:
    """A run directory; ``problem`` says why its records could not be read (then ``info``
    holds what could: the directory name, and the manifest and scenario as found)."""

    info: RunInfo
    problem: str | None = None
    folder: str = "."  # where it sits, relative to the results folder


def _raw_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _unreadable(path: Path, err: ArchiveError, folder: str) -> Listed:
    manifest = _raw_json(path / layout.MANIFEST)
    try:
        scenario = layout.read_scenario(path)
    except ArchiveError:
        scenario = {}
    version = manifest.get("format_version")
    if manifest and version not in ACCEPTED_VERSIONS:
        problem = f"archive format_version {version}"
    else:
        problem = str(err).removeprefix(f"{path}/").removeprefix(f"{path}: ")
    return Listed(RunInfo(path, path.name, manifest, scenario, None), problem, folder)


def list_runs(results_dir: Path | str) -> list[Listed]:
    """Every run under ``results_dir`` at any depth (oldest first), unreadable ones
    included; none if the directory is missing."""
    if not Path(results_dir).is_dir():
        return []
    out = []
    for path in find_all_runs(results_dir):
        folder = folder_of(path, results_dir)
        try:
            out.append(Listed(layout.load_run(path), None, folder))
        except ArchiveError as err:
            out.append(_unreadable(path, err, folder))
    return out


def fix_hint(listed: list[Listed]) -> str | None:
    """What to do about the unreadable runs listed, once."""
    old = [x for x in listed if x.problem and x.problem.startswith("archive format_version 1")]
    return V1_FIX if old else None


def _date(text: str | None, option: str) -> str | None:
    if text is None:
        return None
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise MqlabError(f"--{option}: {text!r} is not a date (use YYYY-MM-DD)") from None


def filter_runs(
    runs: list[Listed],
    broker: str | None = None,
    scenario: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> list[Listed]:
    lo, hi = _date(since, "since"), _date(until, "until")
    out = []
    for x in runs:
        r = x.info
        day = r.started_at[:10]
        if broker and r.broker != broker:
            continue
        if scenario and r.scenario_name != scenario:
            continue
        if lo and day < lo:
            continue
        if hi and day >= hi:
            continue
        out.append(x)
    return out


def row(x: Listed) -> dict[str, Any]:
    """One run as `mqlab ls` shows it. Figures are None when not summarized; a delivery
    figure the summary could not compute is None too, and ``unknown`` says why."""
    r = x.info
    s = r.summary
    tp = (s or {}).get("throughput") or {}
    delivery = (s or {}).get("delivery") or {}
    lab = (s or {}).get("lab") or {}
    return {
        "run_id": r.run_id,
        "folder": x.folder,
        "broker": r.broker,
        "scenario": r.scenario_name,
        # the summary's status is the manifest's, made "partial" when figures are unknown
        "status": x.problem or str((s or r.manifest).get("status")),
        "summarized": s is not None,
        "send_msgs_per_s": tp.get("send_msgs_per_s"),
        "receive_msgs_per_s": tp.get("receive_msgs_per_s"),
        "lost": delivery.get("lost"),
        "undrained": delivery.get("undrained"),
        "marks": marks((s or {}).get("saturation"), (s or {}).get("stand_in")),
        "unknown": {k: v for k, v in unknown.reasons(s or {}).items() if k in delivery},
        "price_per_hour_usd": lab.get("price_per_hour_usd"),
        "cost_usd": (s or {}).get("cost_usd"),
        "cost_per_million_delivered_usd": (s or {}).get("cost_per_million_delivered_usd"),
        "path": str(r.path),
    }


def cells(d: dict[str, Any]) -> list[str]:
    """The table cells of a :func:`row`: "–" when not summarized, "unknown" when null."""

    def fig(v: Any, spec: str) -> str:
        return NOT_SUMMARIZED if not d["summarized"] else unknown.show(v, spec)

    def usd(v: Any) -> str:
        return unknown.UNKNOWN if v is None else f"${v:,.4f}" if v < 1 else f"${v:,.2f}"

    def cost() -> str:  # empty for a lab without a price
        if d.get("price_per_hour_usd") is None:
            return ""
        if not d["summarized"]:
            return NOT_SUMMARIZED
        return f"{usd(d['cost_usd'])} ({usd(d['cost_per_million_delivered_usd'])}/M)"

    return [
        d["run_id"],
        d["folder"],
        d["broker"],
        d["scenario"],
        d["status"],
        fig(d["send_msgs_per_s"], ",.0f"),
        fig(d["receive_msgs_per_s"], ",.0f"),
        fig(d["lost"], ","),
        fig(d["undrained"], ","),
        cost(),
    ]


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The columns and cells of `mqlab ls`: :data:`COLUMNS`, and ``Marks`` (client-bound,
    receivers behind: not the broker's figures) before the cost when a run listed has one."""
    cells_ = [cells(d) for d in rows]
    if not any(d["marks"] for d in rows):
        return list(COLUMNS), cells_
    at = COLUMNS.index("Cost")
    columns = [*COLUMNS[:at], "Marks", *COLUMNS[at:]]
    return columns, [
        [*c[:at], ", ".join(d["marks"]), *c[at:]] for c, d in zip(cells_, rows, strict=True)
    ]
