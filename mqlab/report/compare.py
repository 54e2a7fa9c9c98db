"""Compare stored run summaries (no re-run): side by side, ratios, and whether a
difference exceeds run-to-run noise when repeated trials exist; or runs against
published reference rows."""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlab.analysis import catalog, inplace
from mqlab.errors import ArchiveError

LOG = logging.getLogger(__name__)

# (field, label, higher is better); any may be null in a run (unknown, with a reason)
FIGURES: tuple[tuple[str, str, bool], ...] = (
    ("send_msgs_per_s", "send msgs/s", True),
    ("receive_msgs_per_s", "receive msgs/s", True),
    ("send_call_us_p50", "send call p50 (µs)", False),
    ("send_call_us_p95", "send call p95 (µs)", False),
    ("send_call_us_p99", "send call p99 (µs)", False),
    ("send_msg_us_p99", "send msg p99 (µs)", False),
    ("processing_us_p50", "processing p50 (µs)", False),
    ("processing_us_p95", "processing p95 (µs)", False),
    ("processing_us_p99", "processing p99 (µs)", False),
    ("processing_us_p99_9", "processing p99.9 (µs)", False),
    ("processing_us_max", "processing max (µs)", False),
    ("processing_first_us_p99", "processing first p99 (µs)", False),
    ("sender_lag_ms_max", "sender lag max (ms)", False),
    ("delivery_failed", "failed", False),
    ("delivery_unsent", "unsent", False),
    ("delivery_lost", "lost", False),
    ("delivery_undrained", "undrained", False),
    ("delivery_duplicated", "duplicated", False),
)
# runs with equal values of these are trials of the same configuration
TRIAL_KEY = (
    "scenario",
    "broker",
    "profile",
    "sender_threads",
    "receiver_threads",
    "sender_nodes",
    "receiver_nodes",
    "sender_processes",
    "receiver_processes",
    "message_bytes",
    "batch",
    "sweep",
)
NOISE_FACTOR = 2.0  # a difference counts when it exceeds 2 standard errors


@dataclass(frozen=True)
class Line:
    label: str
    baseline: float | None
    contender: float | None
    ratio: float | None
    verdict: str  # "better" | "worse" | "within noise" | "noise unknown (...)" | ""
    field: str = ""  # the runs column


def resolve_run(ref: str, results_dir: Path | str) -> dict[str, Any]:
    """A run by directory, or by run id (or a unique part of it) among the summarized
    runs under ``results_dir``, at any depth."""
    path = Path(ref)
    if path.is_dir():
        run = catalog.read_run_table(path, "runs").to_pylist()[0]
        # where it is now: an archive moves (a clone, a copy) with the path it was
        # summarized at still in its table
        run["run_dir"] = str(path.resolve())
        return run
    runs = inplace.load_runs(results_dir)
    exact = [r for r in runs if r["run_id"] == ref]
    found = exact or [r for r in runs if ref in r["run_id"]]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ArchiveError(f"{ref}: no such run directory or summarized run in {results_dir}")
    raise ArchiveError(f"{ref}: matches {len(found)} runs; give more of the run id")


def trials_of(run: dict[str, Any], results_dir: Path | str) -> list[dict[str, Any]]:
    """All summarized runs under ``results_dir`` with the same configuration (the run
    itself included)."""
    same = [
        r
        for r in inplace.load_runs(results_dir)
        if all(_trial_value(r, k) == _trial_value(run, k) for k in TRIAL_KEY)
    ]
    if not any(r["run_id"] == run["run_id"] for r in same):
        same.append(run)
    return same


def _trial_value(run: dict[str, Any], key: str) -> Any:
    """``run[key]``; processes per node null in rows summarized before they were counted,
    of runs with one per node."""
    v = run.get(key)
    return 1 if v is None and key.endswith("_processes") else v


def _noise_verdict(
    field: str,
    higher_better: bool,
    pair: tuple[Any, Any],
    base: list[dict[str, Any]],
    cont: list[dict[str, Any]],
) -> str:
    """Same configuration: the pair's difference against the trials' spread; otherwise the
    difference of the trial means against its standard error (either times NOISE_FACTOR)."""
    b = [r[field] for r in base if r.get(field) is not None]
    c = [r[field] for r in cont if r.get(field) is not None]
    if len(b) < 2 or len(c) < 2:
        return f"noise unknown ({len(b)} vs {len(c)} trials)"
    if {r["run_id"] for r in base} == {r["run_id"] for r in cont}:
        # two trials of one configuration: their difference against the trials' spread
        if pair[0] is None or pair[1] is None:
            return ""
        diff = float(pair[1] - pair[0])
        others = list(b)  # the spread of the other trials, when there are enough
        for v in pair:
            others.remove(v)
        se = math.sqrt(2 * statistics.variance(others if len(others) >= 2 else b))
    else:
        diff = statistics.fmean(c) - statistics.fmean(b)
        se = math.sqrt(statistics.variance(b) / len(b) + statistics.variance(c) / len(c))
    if abs(diff) <= NOISE_FACTOR * se:
        return "within noise"
    return "better" if (diff > 0) == higher_better else "worse"


def compare_runs(
    baseline: dict[str, Any],
    contender: dict[str, Any],
    base_trials: list[dict[str, Any]] | None = None,
    cont_trials: list[dict[str, Any]] | None = None,
) -> list[Line]:
    out = []
    for field, label, higher in FIGURES:
        b, c = baseline.get(field), contender.get(field)
        ratio = c / b if b not in (None, 0) and c is not None else None
        verdict = _noise_verdict(
            field, higher, (b, c), base_trials or [baseline], cont_trials or [contender]
        )
        out.append(Line(label, b, c, ratio, verdict, field))
    return out
