"""Parquet next to each run (``RUN_DIR/summary/``) and the catalog over all runs
(``RESULTS_DIR/.catalog/``), plus listing and filtering of summarized runs.

Per run: ``summary/run.parquet`` (one row), ``windows``, ``timeline``, ``latency`` (with
the merged histogram of the measured period), ``delivery`` and ``problems``. The catalog
holds the same tables for every run (without histograms) so DuckDB never globs thousands
of files. :func:`missing_from_catalog` says which runs of a results directory it lacks.

The ``runs`` table carries each run's context too (clock error bound, lab, price, cost:
``clock_bound_ms``, ``cost_usd``, ``cost_per_million_delivered_usd``, ...). Rows written
before a column existed (an older catalog, or a run summarized by an older mqlab) join
the catalog with that column null rather than being dropped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mqlab.analysis.schema import SCHEMAS, TABLES
from mqlab.archive import layout
from mqlab.archive.formats import ACCEPTED_VERSIONS as _ACCEPTED
from mqlab.archive.formats import check_version
from mqlab.errors import ArchiveError

LOG = logging.getLogger(__name__)

CATALOG_DIR = ".catalog"
RUN_FILE = {"runs": "run.parquet"}  # per-run file names that differ from the table name
ACCEPTED_VERSIONS = tuple(str(v).encode() for v in _ACCEPTED)  # Parquet metadata values


def run_file(run_dir: Path | str, table: str) -> Path:
    return Path(run_dir) / layout.SUMMARY_DIR / RUN_FILE.get(table, f"{table}.parquet")


def catalog_file(results_dir: Path | str, table: str) -> Path:
    return Path(results_dir) / CATALOG_DIR / f"{table}.parquet"


def _write_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def write_run_tables(run_dir: Path | str, tables: dict[str, pa.Table]) -> None:
    for name in TABLES:
        _write_atomic(tables[name], run_file(run_dir, name))


def read_run_table(run_dir: Path | str, table: str) -> pa.Table:
    path = run_file(run_dir, table)
    if not path.is_file():
        if run_file(run_dir, "runs").is_file():  # summarized before this table existed
            raise ArchiveError(
                f"{run_dir}: summarized by an older mqlab (no {table} table); "
                f"run `mqlab summarize {run_dir}`"
            )
        raise ArchiveError(f"{run_dir}: not summarized yet (run `mqlab summarize {run_dir}`)")
    data = pq.read_table(path)
    version = (data.schema.metadata or {}).get(b"format_version")
    if version not in ACCEPTED_VERSIONS:
        check_version(path, int(version) if version and version.isdigit() else version)
    # a summary written before a column existed reads with it null (unknown, never 0)
    return conform(data, SCHEMAS[table]) if table in SCHEMAS else data


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns in its order: columns it lacks (added since it
    was written) are null, columns the schema no longer has are left out. Raises
    ``pa.ArrowInvalid``/``ValueError`` when a column cannot be cast."""
    n = table.num_rows
    cols = [table[f.name] if f.name in table.column_names else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(cols, names=schema.names).cast(schema)


def update_catalog(results_dir: Path | str, per_run: Sequence[dict[str, pa.Table]]) -> None:
    """Replace the rows of these runs in the catalog (add them when new)."""
    if not per_run:
        return
    ids = pa.array([t["runs"]["run_id"][0].as_py() for t in per_run], pa.string())
    for name in TABLES:
        schema = empty_table(name).schema
        parts = [t[name] for t in per_run]
        if name == "latency":
            parts = [p.drop_columns(["histogram"]) for p in parts]
        parts = [conform(p, schema) for p in parts]
        path = catalog_file(results_dir, name)
        if path.is_file():
            old = pq.read_table(path)
            old = old.filter(pc.invert(pc.is_in(old["run_id"], value_set=ids)))
            try:
                parts.insert(0, conform(old, schema))
            except (pa.ArrowInvalid, ValueError) as err:  # an older format: not mixed in
                LOG.warning(
                    "%s: older catalog format dropped (%s); mqlab summarize --all "
                    "puts its runs back",
                    path,
                    str(err).splitlines()[0],
                )
        _write_atomic(pa.concat_tables(parts), path)


def catalog_run_ids(results_dir: Path | str) -> set[str]:
    path = catalog_file(results_dir, "runs")
    if not path.is_file():
        return set()
    return set(pq.read_table(path, columns=["run_id"])["run_id"].to_pylist())


def missing_from_catalog(results_dir: Path | str) -> list[str]:
    """Run directories under ``results_dir`` whose figures the catalog does not hold."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    known = catalog_run_ids(root)
    return [p.name for p in layout.find_runs(root) if p.name not in known]


def rebuild_catalog(results_dir: Path | str) -> int:
    """Rebuild the catalog from every run's own Parquet; returns the number of runs."""
    per_run = []
    for d in sorted(Path(results_dir).iterdir()):
        if not run_file(d, "runs").is_file():
            continue
        missing = [t for t in TABLES if not run_file(d, t).is_file()]
        if missing:
            LOG.warning(
                "%s: summarized by an older mqlab (no %s table): left out of the catalog; "
                "run `mqlab summarize %s`",
                d,
                ", ".join(missing),
                d,
            )
            continue
        per_run.append({t: pq.read_table(run_file(d, t)) for t in TABLES})
    for name in TABLES:
        catalog_file(results_dir, name).unlink(missing_ok=True)
    update_catalog(results_dir, per_run)
    return len(per_run)


def empty_table(name: str) -> pa.Table:
    schema = SCHEMAS[name]
    if name == "latency":
        schema = schema.remove(schema.get_field_index("histogram"))
    return schema.empty_table()


def load_runs(results_dir: Path | str) -> list[dict[str, Any]]:
    """Every summarized run of the catalog, as dicts (newest first)."""
    path = catalog_file(results_dir, "runs")
    if not path.is_file():
        return []
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        r["run_dir"] = str(_where_now(Path(results_dir), r.get("run_dir") or ""))
    return sorted(rows, key=lambda r: r["started_at"] or "", reverse=True)


def _where_now(results_dir: Path, recorded: str) -> Path:
    """A catalogued run's directory under ``results_dir`` today (the results folder may
    have moved since the run was summarized: a clone, a copy); else the recorded path."""
    name = Path(recorded).name
    if name:
        for candidate in (results_dir / name, *results_dir.glob(f"*/{name}")):
            if candidate.is_dir():
                return candidate.resolve()
    return Path(recorded)


def _as_datetime(value: str | date | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value.astimezone(UTC) if isinstance(value, datetime) and value.tzinfo else value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as err:
        raise ArchiveError(f"{value!r}: not a date (use YYYY-MM-DD or ISO time)") from err
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _started(run: dict[str, Any]) -> datetime | None:
    text = run.get("started_at") or ""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def filter_runs(
    runs: Iterable[dict[str, Any]],
    broker: str | None = None,
    scenario: str | None = None,
    since: str | date | datetime | None = None,
    until: str | date | datetime | None = None,
) -> list[dict[str, Any]]:
    """Runs (dicts with broker, scenario, started_at) matching every filter given.

    ``since`` is inclusive, ``until`` exclusive; a bare date means midnight UTC, so
    ``--since 2026-11-22 --until 2026-11-23`` is that day. Naive times are UTC.
    """
    lo, hi = _as_datetime(since), _as_datetime(until)
    if lo and lo.tzinfo is None:
        lo = lo.replace(tzinfo=UTC)
    if hi and hi.tzinfo is None:
        hi = hi.replace(tzinfo=UTC)
    out = []
    for r in runs:
        if broker is not None and r.get("broker") != broker:
            continue
        if scenario is not None and r.get("scenario") != scenario:
            continue
        if lo or hi:
            t = _started(r)
            if t is None or (lo and t < lo) or (hi and t >= hi):
                continue
        out.append(r)
    return out
