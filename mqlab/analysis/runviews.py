"""DuckDB views over run archives' own Parquet summaries, read where they lie
(``RUN_DIR/summary/*.parquet``): one view per table of
:data:`mqlab.analysis.schema.TABLES` (``latency`` without its histograms, ``runs`` with
each run's ``folder`` and ``run_dir`` where it is now), and the small helpers the
views and the query cache (:mod:`mqlab.analysis.querycache`) share."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from mqlab.analysis.catalog import empty_table, run_file
from mqlab.analysis.schema import TABLES
from mqlab.archive import layout

TOP = "."  # the folder of a run directly under the results folder


def connect_memory() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that prints no progress bar (a long first query writing the
    cache would draw one on the user's terminal, between mqlab's own lines)."""
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    return con


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def rel_path(root: str, path: str) -> str:
    return path[len(root) :].lstrip(os.sep).replace(os.sep, "/")


def folder_of_rel(rel: str) -> str:
    """The folder of a run's path relative to the results folder (``.`` at the top)."""
    return os.path.dirname(rel) or TOP


def empty_view(con: duckdb.DuckDBPyConnection, name: str, extra: str = "") -> None:
    con.register(f"_{name}_empty", empty_table(name))
    con.execute(f"CREATE VIEW {name} AS SELECT *{extra} FROM _{name}_empty")


def in_place_views(
    con: duckdb.DuckDBPyConnection, root: Path, summarized: list[str], tables: Sequence[str]
) -> None:
    """One view per table of ``tables`` over the runs' own files; columns a file lacks
    (written before they existed) are null, and ``runs`` gets each run's ``folder`` and
    ``run_dir``; the other tables' views are empty."""
    top, resolved = str(root), str(root.resolve())
    rels = [rel_path(top, p) for p in summarized]
    where = pa.table(
        {
            "_path": pa.array(summarized, pa.string()),
            "_folder": pa.array([folder_of_rel(r) for r in rels], pa.string()),
            "_run_dir": pa.array([os.path.join(resolved, r) for r in rels], pa.string()),
        }
    )
    con.register("_where", where)
    for name in TABLES:
        fname = run_file(Path(), name).as_posix()
        files = [os.path.join(p, fname) for p in summarized] if name in tables else []
        files = [f for f in files if os.path.isfile(f)]
        if not files:
            empty_view(con, name, ", NULL::VARCHAR AS folder" if name == "runs" else "")
            continue
        con.register(f"_{name}_empty", empty_table(name))
        listed = "[" + ", ".join(quote(f) for f in files) + "]"
        drop = " EXCLUDE (histogram)" if name == "latency" else ""
        read = f"SELECT *{drop} FROM read_parquet({listed}, union_by_name = true, filename = true)"
        conformed = f"SELECT * FROM _{name}_empty UNION ALL BY NAME ({read})"
        if name == "runs":
            con.execute(
                f"CREATE VIEW runs AS SELECT r.* EXCLUDE (filename, run_dir), "
                f"w._run_dir AS run_dir, w._folder AS folder FROM ({conformed}) r "
                f"JOIN _where w ON regexp_replace(r.filename, '/{layout.SUMMARY_DIR}/[^/]+$', '')"
                f" = w._path"
            )
        else:
            con.execute(f"CREATE VIEW {name} AS SELECT * EXCLUDE (filename) FROM ({conformed})")
