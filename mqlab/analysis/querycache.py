"""The query cache (``RESULTS/.catalog/cache/``): every run's summary tables
concatenated in one DuckDB database file (``tables.duckdb``: DuckDB's own storage, read
without decoding Parquet), with the list of the summary files it was written from (each
``run.parquet``'s path, size and modification time) and a fingerprint of that list.

:mod:`mqlab.analysis.inplace` lets it answer only when the fingerprint of the runs found
is the one held; otherwise it is rewritten first (:func:`write_cache`), keeping the rows
of the runs unchanged since and reading the others in place."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from mqlab.analysis.catalog import CATALOG_DIR
from mqlab.analysis.runviews import connect_memory, empty_view, in_place_views, quote, rel_path
from mqlab.analysis.schema import TABLES

LOG = logging.getLogger(__name__)

CACHE_DIR = "cache"  # under RESULTS/.catalog
SOURCES = "sources.json"  # each summary's size and time, by path: what can be kept
LISTING = "listing.txt"  # the fingerprint of the sources, then the runs held, a line each
DATABASE = "tables.duckdb"  # the cached tables, in DuckDB's own storage format
CACHE_VERSION = 3
CACHED = "cache"  # the cache's name when attached to a connection


def cache_dir(root: Path) -> Path:
    return root / CATALOG_DIR / CACHE_DIR


def database(root: Path) -> Path:
    return cache_dir(root) / DATABASE


def held(root: Path) -> tuple[str, frozenset[str]]:
    """The cache's fingerprint and the runs it holds (relative paths); ("", {}) when
    there is no cache (or one half written)."""
    try:
        text = (cache_dir(root) / LISTING).read_text(encoding="utf-8")
    except OSError:
        return "", frozenset()
    first, _, rest = text.partition("\n")
    return first, frozenset(rest.splitlines())


def fingerprint(resolved: str, lines: list[str]) -> str:
    """One digest of the results folder and every summary's line (path, size, time)."""
    # DuckDB's storage format is its version's: a cache written by another is rewritten
    text = "\n".join([f"{CACHE_VERSION} {duckdb.__version__}", resolved, *lines])
    return hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=20).hexdigest()


def cache_fresh(root: Path, held_print: str, found_print: str) -> bool:
    return bool(held_print) and held_print == found_print and database(root).is_file()


def attach(con: duckdb.DuckDBPyConnection, path: Path, name: str) -> None:
    con.execute(f"ATTACH {quote(str(path))} AS {name} (READ_ONLY)")


def cache_views(con: duckdb.DuckDBPyConnection, root: Path, tables: Sequence[str]) -> None:
    """The views over the cache's tables (attached read-only; a cache replaced meanwhile
    is read as it was when attached)."""
    if any(t in TABLES for t in tables):
        attach(con, database(root), CACHED)
    for name in TABLES:
        if name not in tables:
            empty_view(con, name, ", NULL::VARCHAR AS folder" if name == "runs" else "")
            continue
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM {CACHED}.{name}")


def _reusable(root: Path, sources: dict[str, Any]) -> set[str]:
    """The runs (relative paths) whose rows the cache holds unchanged: same results
    folder, same ``run.parquet`` (size and time)."""
    try:
        held = json.loads((cache_dir(root) / SOURCES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(held, dict) or any(
        held.get(k) != sources[k] for k in ("format_version", "results_dir")
    ):
        return set()
    if not database(root).is_file():
        return set()
    old = held.get("runs") or {}
    return {rel for rel, stat in sources["runs"].items() if old.get(rel) == stat}


def _kept_ids(con: duckdb.DuckDBPyConnection, root: Path, reuse: set[str]) -> list[str] | None:
    """The run ids (as the rows have them) of the runs kept from the cache (attached to
    ``con`` as ``old``); None when they cannot stand for those runs alone (the tables
    other than ``runs`` know a run by its id): two kept runs share one, a run read in
    place or one the cache held and is gone has one of them."""
    resolved = str(root.resolve())
    dirs = pa.table({"run_dir": pa.array([os.path.join(resolved, r) for r in reuse], pa.string())})
    con.register("_kept_dirs", dirs)
    runs = "old.runs"
    kept = [
        r[0]
        for r in con.execute(
            f"SELECT run_id FROM {runs} WHERE run_dir IN (SELECT run_dir FROM _kept_dirs)"
        ).fetchall()
    ]
    fresh = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    if len(kept) != len(reuse) or len(set(kept)) != len(kept) or fresh & set(kept):
        return None
    con.register("_kept_ids", pa.table({"run_id": pa.array(kept, pa.string())}))
    ((held,),) = con.execute(
        f"SELECT count(*) FROM {runs} WHERE run_id IN (SELECT run_id FROM _kept_ids)"
    ).fetchall()
    if held != len(kept):  # a run gone from the folder had one of their ids
        return None
    return kept


def write_cache(root: Path, summarized: list[str], sources: dict[str, Any], listing: str) -> bool:
    """Every run's rows into the cache (False when it cannot be written): the rows it
    holds of runs unchanged since, and the others' read in place. The database is written
    beside the old one and renamed over it (a query reading the old one goes on reading
    it); its list of sources and its listing are written last (and removed first), so a
    cache half written is never taken for a fresh one. DuckDB's own storage, not Parquet:
    a cache is read often, and a query over 6,000,000 rows spends less time reading
    DuckDB's blocks than decoding Parquet's pages."""
    cache, held_db = cache_dir(root), database(root)
    reuse = _reusable(root, sources)
    tmp_db = cache / f".{DATABASE}.tmp{os.getpid()}"
    con = connect_memory()
    try:
        changed = [p for p in summarized if rel_path(str(root), p) not in reuse]
        in_place_views(con, root, changed, TABLES)
        kept: list[str] | None = []
        if reuse:
            try:
                attach(con, held_db, "old")
                kept = _kept_ids(con, root, reuse)
            except duckdb.Error:  # not a database this DuckDB reads: every run anew
                kept = None
        if kept is None:  # rebuilt from every run
            reuse, kept = set(), []
            con.close()
            con = connect_memory()
            in_place_views(con, root, summarized, TABLES)
        con.register("_reuse", pa.table({"run_id": pa.array(kept, pa.string())}))
        cache.mkdir(parents=True, exist_ok=True)
        (cache / LISTING).unlink(missing_ok=True)
        (cache / SOURCES).unlink(missing_ok=True)
        for leftover in (tmp_db, Path(f"{tmp_db}.wal")):
            leftover.unlink(missing_ok=True)
        con.execute(f"ATTACH {quote(str(tmp_db))} AS new")
        for name in TABLES:
            rows = f"SELECT * FROM {name}"
            if reuse:
                rows = (
                    f"SELECT * FROM old.{name} WHERE run_id IN "
                    f"(SELECT run_id FROM _reuse) UNION ALL BY NAME {rows}"
                )
            con.execute(f"CREATE TABLE new.{name} AS {rows}")
        con.execute("DETACH new")  # checkpointed: the file holds every table, no WAL
        if reuse:
            con.execute("DETACH old")
        os.replace(tmp_db, held_db)
        tmp = cache / f".{SOURCES}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(sources), encoding="utf-8")
        os.replace(tmp, cache / SOURCES)
        tmp = cache / f".{LISTING}.tmp{os.getpid()}"
        tmp.write_text(listing, encoding="utf-8")
        os.replace(tmp, cache / LISTING)
        for old in TABLES:  # the Parquet files of a cache of CACHE_VERSION 2
            (cache / f"{old}.parquet").unlink(missing_ok=True)
        return True
    except (OSError, duckdb.Error) as err:  # a read-only results folder: no cache
        LOG.info("%s: cache not written (%s)", cache, str(err).splitlines()[0])
        return False
    finally:
        con.close()
        for leftover in (tmp_db, Path(f"{tmp_db}.wal")):
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)
