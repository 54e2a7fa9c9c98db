"""The summary of runs, in process: the Spark job's own functions without Spark.

``mqlab run`` calls :func:`summarize_runs` right after each run, so every archived run
has its ``summary.json``, its Parquet tables and its rows in the results directory's
catalog. ``spark/summarize.py`` runs the same partial and final steps on a Spark
cluster (or ``local[*]``) and writes its outputs with :func:`write_outputs`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from mqlab.analysis import catalog, partials, plan, tables
from mqlab.archive import layout
from mqlab.archive.formats import write_json
from mqlab.errors import ArchiveError

LOG = logging.getLogger(__name__)
DEFAULT_WINDOW_S = 60.0


def window_ms_of(window_s: float) -> int:
    if window_s <= 0:
        raise ArchiveError(f"--window-s {window_s}: must be positive")
    return round(window_s * 1000)


def write_run_outputs(run_dir: Path | str, tbls: dict[str, pa.Table]) -> dict[str, Any]:
    """Write a run's Parquet tables and its ``summary.json``; returns the summary."""
    catalog.write_run_tables(run_dir, tbls)
    summary = tables.as_summary(tbls["runs"].to_pylist()[0], tbls["faults"].to_pylist())
    write_json(Path(run_dir) / layout.SUMMARY, summary)
    return summary


def write_outputs(
    run_dir: Path | str, tbls: dict[str, pa.Table], results_dir: Path | str | None = None
) -> dict[str, Any]:
    """:func:`write_run_outputs`, and the run's rows into the catalog of ``results_dir``
    (default: the run's parent directory)."""
    summary = write_run_outputs(run_dir, tbls)
    root = Path(results_dir) if results_dir is not None else Path(run_dir).parent
    catalog.update_catalog(root, [tbls])
    return summary


def summarize_run(
    run_dir: Path | str, window_s: float = DEFAULT_WINDOW_S, results_dir: Path | str | None = None
) -> dict[str, Any]:
    """Summarize one run in this process; returns its summary (as ``summary.json``)."""
    window_ms = window_ms_of(window_s)
    meta = plan.read_run(run_dir)
    results = partials.run_locally(plan.tasks_for(meta, window_ms))
    for path, line, text in results.get(("prb", meta.run_id), []):
        LOG.warning("%s%s: %s (skipped)", path, f":{line}" if line else "", text)
    return write_outputs(run_dir, tables.build_tables(meta, results, window_ms), results_dir)


def summarize_runs(
    run_dirs: Sequence[Path | str],
    window_s: float = DEFAULT_WINDOW_S,
    results_dir: Path | str | None = None,
) -> list[dict[str, Any]]:
    return [summarize_run(d, window_s, results_dir) for d in run_dirs]
