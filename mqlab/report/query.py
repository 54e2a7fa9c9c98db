"""DuckDB over every run archive under a results folder, at any depth, read in place
(:mod:`mqlab.analysis.inplace`): one view per summary table (``runs``, ``windows``,
``timeline``, ``latency``, ``delivery``, ``problems``, ``faults``; their columns are
:data:`mqlab.analysis.schema.SCHEMAS`, ``runs`` with the run's ``folder``), and
``archives``: every run found, summarized or not. Results as rows, CSV or JSON.

A figure the summary could not compute is NULL (``runs.unknown`` says why), so SQL
aggregates skip it: count the NULLs when that matters (the third example)."""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path
from typing import Any

import duckdb

from mqlab.analysis import inplace
from mqlab.analysis.schema import TABLES
from mqlab.errors import ArchiveError, MqlabError

LOG = logging.getLogger(__name__)

EXAMPLES = (
    "SELECT broker, sender_threads, sender_nodes, receiver_nodes, "
    "round(send_msgs_per_s) AS send, round(processing_us_p95 / 1000, 1) AS p95_ms "
    "FROM runs ORDER BY send DESC LIMIT 10",
    "SELECT run_id, max(processing_us_p95) / 1000 AS worst_1min_p95_ms FROM windows "
    "GROUP BY run_id ORDER BY worst_1min_p95_ms DESC LIMIT 10",
    "SELECT broker, count(*) AS runs, sum(delivery_lost) AS lost, "
    "count(*) FILTER (WHERE delivery_lost IS NULL) AS lost_unknown, "
    "sum(delivery_undrained) AS undrained, sum(delivery_duplicated) AS duplicated "
    "FROM runs GROUP BY broker ORDER BY broker",
    "SELECT metric, round(avg(p99)) AS avg_p99_us FROM latency WHERE window_index IS NULL "
    "GROUP BY metric",
    "SELECT run_id, max(backlog) AS max_backlog, max(sender_lag_ms) AS max_lag_ms, "
    "max(processing_us_p99) / 1000 AS worst_1s_p99_ms FROM timeline "
    "GROUP BY run_id ORDER BY max_backlog DESC LIMIT 10",
)


class QueryError(MqlabError):
    """The SQL given to ``mqlab query`` failed."""


VIEWS = (*TABLES, "archives")


def run_query(
    results_dir: Path | str, sql: str, use_cache: bool = True
) -> tuple[list[str], list[tuple[Any, ...]]]:
    columns, rows, _found = run_query_found(results_dir, sql, use_cache)
    return columns, rows


def run_query_found(
    results_dir: Path | str, sql: str, use_cache: bool = True
) -> tuple[list[str], list[tuple[Any, ...]], inplace.Found]:
    """The columns and rows of ``sql``, and the runs found (those without a summary are
    in the view ``archives`` only)."""
    if not Path(results_dir).is_dir():
        raise ArchiveError(f"{results_dir}: no such results directory")
    try:
        return inplace.answer(results_dir, sql, use_cache)
    except duckdb.Error as err:
        first = str(err).splitlines()[0]
        raise QueryError(f"query failed: {first} (views: {', '.join(VIEWS)})") from err


def to_csv(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    return buf.getvalue()


def to_json(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    return json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str, indent=1)
