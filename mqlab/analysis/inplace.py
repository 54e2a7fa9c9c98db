"""Every run archive under a results folder, at any depth, and DuckDB views over their
own Parquet summaries read where they lie (``RUN_DIR/summary/*.parquet``).

A run is a directory holding ``manifest.json``; the walk does not go into a run, nor
into hidden folders (``.catalog``). The folder a run sits in (relative to the results
folder, ``.`` for the top) is its ``folder``.

The views (``runs``, ``windows``, ``timeline``, ``latency``, ``delivery``, ``problems``,
``faults``; columns :data:`mqlab.analysis.schema.SCHEMAS`, ``latency`` without its
histograms, ``runs`` with ``folder`` and ``run_dir`` where the run is now) hold every
summarized run found, and the view ``archives`` every run found, summarized or not.

The cache (:mod:`mqlab.analysis.querycache`, ``RESULTS/.catalog/cache/``) holds the
same tables. Every query lists the runs (one ``scandir`` a folder; one ``stat`` a run
the cache knows, of its ``run.parquet``, which sees a summary rewritten in place as well
as one renamed over it) and the cache answers only when the fingerprint of what it found
is the one held, so it can never answer with fewer or staler runs than the archives
hold; otherwise it is rewritten first (and when the folder cannot be written, the views
read every run in place). A run the cache knows is not asked for its manifest again
while its summary is there."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from mqlab.analysis import querycache
from mqlab.analysis.catalog import run_file
from mqlab.analysis.runviews import TOP, connect_memory, folder_of_rel, in_place_views, rel_path
from mqlab.analysis.schema import TABLES
from mqlab.archive import layout
from mqlab.errors import ArchiveError

LOG = logging.getLogger(__name__)

ARCHIVES = "archives"  # the view of every run found, summarized or not
VIEWS = (*TABLES, ARCHIVES)


def _walk(root: str) -> list[str]:
    """The run directories under ``root`` (paths as strings, ``root`` joined to each),
    oldest first, then by folder; hidden folders and the folders of a run are not
    searched. Strings and ``os.scandir``: a query lists 10,000 runs in tens of ms."""
    found: list[str] = []
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(".") or not e.is_dir():
                continue
            if os.path.isfile(os.path.join(e.path, layout.MANIFEST)):
                found.append(e.path)  # a run: its own folders are not searched
            else:
                stack.append(e.path)
    return sorted(found, key=lambda p: (os.path.basename(p), p))


def find_all_runs(results_dir: Path | str) -> list[Path]:
    """Every run directory under ``results_dir`` at any depth, oldest first (a run's
    name starts with its start time), then by folder."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ArchiveError(f"{root}: no such results directory")
    return [Path(p) for p in _walk(str(root))]


def folder_of(run_dir: Path, results_dir: Path | str) -> str:
    """The folder ``run_dir`` sits in, relative to ``results_dir`` (``.`` at the top)."""
    try:
        rel = run_dir.parent.relative_to(Path(results_dir))
    except ValueError:
        return str(run_dir.parent)
    return TOP if str(rel) in ("", ".") else rel.as_posix()


@dataclass(frozen=True)
class Found:
    """The runs found under a results folder (paths as strings, the results folder joined
    to each): ``summarized`` have ``summary/run.parquet``; ``source`` says where the
    views read: "in place" or "cache"."""

    results_dir: Path
    run_paths: list[str]
    summarized_paths: list[str]
    source: str

    @property
    def runs(self) -> list[Path]:
        return [Path(p) for p in self.run_paths]

    @property
    def summarized(self) -> list[Path]:
        return [Path(p) for p in self.summarized_paths]

    @property
    def not_summarized(self) -> list[Path]:
        done = set(self.summarized_paths)
        return [Path(p) for p in self.run_paths if p not in done]


_RUN_PARQUET = os.sep + str(run_file(Path(), "runs"))  # /summary/run.parquet


def _summary_stat(run: str) -> os.stat_result | None:
    try:
        return os.stat(run + _RUN_PARQUET)
    except OSError:
        return None


def _scan(root: str, known: frozenset[str]) -> tuple[list[str], list[str], list[str]]:
    """The runs under ``root`` as :func:`_walk` finds them, those summarized, and the
    cache's line for each summarized one (relative path, ``run.parquet``'s size and
    modification time). A run the cache knows (``known``: relative paths) costs one
    ``stat``, of its ``run.parquet``: its manifest is looked for only when that is gone;
    any other directory is a run when it holds ``manifest.json``."""
    found: list[tuple[str, str, str]] = []  # (name, path, line; "" when not summarized)
    start = len(root) + 1
    stack = [root]
    summary = _RUN_PARQUET
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for e in entries:
            name = e.name
            if name[0] == "." or not e.is_dir():
                continue
            path = e.path
            rel = path[start:]
            st = None
            if rel in known:
                try:
                    st = os.stat(path + summary)
                except OSError:
                    st = None
            if st is None:
                if not os.path.isfile(os.path.join(path, layout.MANIFEST)):
                    stack.append(path)  # a folder: searched; a run: its folders are not
                    continue
                st = _summary_stat(path)
                if st is None:
                    found.append((name, path, ""))  # not summarized yet
                    continue
            found.append((name, path, f"{rel}\t{st.st_size}\t{st.st_mtime_ns}"))
    found.sort()
    if os.sep != "/":
        found = [(n, p, line.replace(os.sep, "/")) for n, p, line in found]
    return (
        [p for _n, p, _line in found],
        [p for _n, p, line in found if line],
        [line for _n, _p, line in found if line],
    )


def _archives_view(
    con: duckdb.DuckDBPyConnection, root: Path, found: Found, tables: Sequence[str]
) -> None:
    """The view ``archives``: every run found (empty when ``tables`` does not name it)."""
    paths = found.run_paths if ARCHIVES in tables else []
    done = set(found.summarized_paths)
    top, resolved = str(root), str(root.resolve())
    rels = [rel_path(top, p) for p in paths]
    con.register(
        "_archives",
        pa.table(
            {
                "run_id": pa.array([os.path.basename(r) for r in rels], pa.string()),
                "folder": pa.array([folder_of_rel(r) for r in rels], pa.string()),
                "run_dir": pa.array([os.path.join(resolved, r) for r in rels], pa.string()),
                "summarized": pa.array([p in done for p in paths], pa.bool_()),
            }
        ),
    )
    con.execute("CREATE VIEW archives AS SELECT * FROM _archives")


def tables_in(sql: str) -> list[str]:
    """The views ``sql`` names (a word of it), so that only those read any file."""
    words = set(re.findall(r"[a-z_]+", sql.lower()))
    return [t for t in VIEWS if t in words]


@dataclass(frozen=True)
class _Listing:
    """The cache's fingerprint (``""``: none, or not asked) and the runs :func:`_scan`
    found: all of them, those summarized, and each summarized one's line."""

    held: str
    runs: list[str]
    summarized: list[str]
    lines: list[str]


def _list(root: Path, held: str, known: frozenset[str]) -> _Listing:
    return _Listing(held, *_scan(str(root), known))


def connect(
    results_dir: Path | str,
    use_cache: bool = True,
    tables: Sequence[str] = VIEWS,
    listed: _Listing | None = None,
) -> tuple[duckdb.DuckDBPyConnection, Found]:
    """An in-memory DuckDB with the views over every run under ``results_dir`` (those of
    ``tables`` read files, the others are empty), and what was found. The cache answers
    when it holds exactly the runs found; when it does not it is rewritten first (and
    when it cannot be, the views read in place). ``use_cache=False`` reads in place and
    leaves the cache alone. ``listed``: the runs listed just now (by :func:`_speculate`),
    not listed again."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ArchiveError(f"{root}: no such results directory")
    if listed is None:
        listed = _list(root, *(querycache.held(root) if use_cache else ("", frozenset[str]())))
    held, runs, summarized, lines = listed.held, listed.runs, listed.summarized, listed.lines
    con = connect_memory()
    fresh = False
    if use_cache and summarized:
        resolved = str(root.resolve())
        fingerprint = querycache.fingerprint(resolved, lines)
        fresh = querycache.cache_fresh(root, held, fingerprint)
        if not fresh:
            stats = {}
            for line in lines:
                rel, size, mtime = line.rsplit("\t", 2)
                stats[rel] = [int(size), int(mtime)]
            sources = {
                "format_version": querycache.CACHE_VERSION,
                "results_dir": resolved,
                "runs": stats,
            }
            listing = "\n".join([fingerprint, *(rel_path(str(root), p) for p in summarized)])
            fresh = querycache.write_cache(root, summarized, sources, listing)
    if fresh:
        try:
            querycache.cache_views(con, root, tables)
        except duckdb.Error as err:  # unreadable (damaged, or gone since): read in place
            LOG.info(
                "%s: cache not read (%s)", querycache.cache_dir(root), str(err).splitlines()[0]
            )
            con.close()
            con = connect_memory()
            fresh = False
    if fresh:
        found = Found(root, runs, summarized, "cache")
    else:
        in_place_views(con, root, summarized, tables)
        found = Found(root, runs, summarized, "in place")
    _archives_view(con, root, found, tables)
    return con, found


Answer = tuple[list[str], list[tuple[Any, ...]], Found]


def _speculate(root: Path, sql: str, tables: Sequence[str]) -> Answer | _Listing:
    """``sql`` over the cache while the archives are listed, on a thread of its own
    (DuckDB runs a query without Python's lock): its answer is taken only once the
    listing's fingerprint is the one the cache holds, exactly what :func:`connect`
    checks first; otherwise the query is stopped and the listing returned, for
    :func:`connect` to go on from. A query through a fresh cache then costs the longer
    of the two, not both."""
    held, known = querycache.held(root)
    if not held or ARCHIVES in tables or not querycache.database(root).is_file():
        return _list(root, held, known)
    con = connect_memory()
    try:
        querycache.cache_views(con, root, tables)
    except duckdb.Error:
        con.close()
        return _list(root, held, known)
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            cur = con.execute(sql)
            out["columns"] = [d[0] for d in cur.description or []]
            out["rows"] = cur.fetchall()
        except duckdb.Error as err:
            out["error"] = err

    thread = threading.Thread(target=work, name="mqlab-query", daemon=True)
    thread.start()
    try:
        listed = _list(root, held, known)
        found_print = querycache.fingerprint(str(root.resolve()), listed.lines)
        fresh = bool(listed.summarized) and found_print == held
        if not fresh:
            con.interrupt()
        thread.join()
    finally:
        con.close()
    if not fresh:
        return listed
    if "error" in out:
        raise out["error"]
    return out["columns"], out["rows"], Found(root, listed.runs, listed.summarized, "cache")


def answer(results_dir: Path | str, sql: str, use_cache: bool = True) -> Answer:
    """The columns and rows of ``sql`` over every run under ``results_dir`` (the views of
    :func:`connect`), and what was found; a fresh cache answers as the archives are
    listed (:func:`_speculate`). Raises ``duckdb.Error`` for a query that fails."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ArchiveError(f"{root}: no such results directory")
    tables = tables_in(sql)
    listed = None
    if use_cache:
        got = _speculate(root, sql, tables)
        if not isinstance(got, _Listing):
            return got
        listed = got  # the cache did not answer: not listed again
    con, found = connect(root, use_cache, tables, listed)
    try:
        cur = con.execute(sql)
        return [d[0] for d in cur.description or []], cur.fetchall(), found
    finally:
        con.close()


def load_runs(results_dir: Path | str) -> list[dict[str, Any]]:
    """The ``runs`` row of every summarized run under ``results_dir`` (newest first),
    ``run_dir`` where it is now."""
    if not Path(results_dir).is_dir():
        return []
    con, _found = connect(results_dir)
    try:
        rows = con.sql("SELECT * FROM runs").to_arrow_table().to_pylist()
    finally:
        con.close()
    return sorted(rows, key=lambda r: r.get("started_at") or "", reverse=True)
