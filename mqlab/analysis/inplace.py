"""Every run archive under a results folder, at any depth, and DuckDB views over their
own Parquet summaries read where they lie (``RUN_DIR/summary/*.parquet``).

A run is a directory holding ``manifest.json``; the walk does not go into a run, nor
into hidden folders (``.catalog``). The folder a run sits in (relative to the results
folder, ``.`` for the top) is its ``folder``.

The views (``runs``, ``windows``, ``timeline``, ``latency``, ``delivery``, ``problems``,
``faults``; columns :data:`mqlab.analysis.schema.SCHEMAS`, ``latency`` without its
histograms, ``runs`` with ``folder`` and ``run_dir`` where the run is now) hold every
summarized run found, and the view ``archives`` every run found, summarized or not.

The cache (``RESULTS/.catalog/cache/``) holds the same tables concatenated, with the
list of the summary files it was written from (each ``run.parquet``'s path, size and
modification time). It answers only when that list is exactly the one found now, so it
can never answer with fewer runs than the archives hold; otherwise it is rewritten
first, keeping the rows of the runs unchanged since and reading the others in place
(and when the folder cannot be written, the views read every run in place)."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from mqlab.analysis.catalog import CATALOG_DIR, empty_table, run_file
from mqlab.analysis.schema import TABLES
from mqlab.archive import layout
from mqlab.errors import ArchiveError

LOG = logging.getLogger(__name__)

CACHE_DIR = "cache"  # under RESULTS/.catalog
SOURCES = "sources.json"
CACHE_VERSION = 1
TOP = "."  # the folder of a run directly under the results folder


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


def _folder(rel: str) -> str:
    """The folder of a run's path relative to the results folder (``.`` at the top)."""
    return os.path.dirname(rel) or TOP


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


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


RUN_PARQUET = run_file(Path(), "runs").as_posix()  # summary/run.parquet


def _rel(root: str, path: str) -> str:
    return path[len(root) :].lstrip(os.sep).replace(os.sep, "/")


def _stat_runs(root: str, runs: list[str]) -> tuple[list[str], dict[str, list[int]]]:
    """The summarized runs of ``runs`` and, by relative path, their ``run.parquet``'s
    size and modification time (one ``stat`` a run)."""
    summarized, stats = [], {}
    for p in runs:
        try:
            st = os.stat(os.path.join(p, RUN_PARQUET))
        except OSError:
            continue
        summarized.append(p)
        stats[_rel(root, p)] = [st.st_size, st.st_mtime_ns]
    return summarized, stats


def _cache_dir(root: Path) -> Path:
    return root / CATALOG_DIR / CACHE_DIR


def _cache_fresh(root: Path, sources: dict[str, Any]) -> bool:
    path = _cache_dir(root) / SOURCES
    try:
        held = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if held != sources:
        return False
    return all((_cache_dir(root) / f"{t}.parquet").is_file() for t in TABLES)


def _empty_view(con: duckdb.DuckDBPyConnection, name: str, extra: str = "") -> None:
    con.register(f"_{name}_empty", empty_table(name))
    con.execute(f"CREATE VIEW {name} AS SELECT *{extra} FROM _{name}_empty")


def _in_place_views(
    con: duckdb.DuckDBPyConnection, root: Path, summarized: list[str], tables: Sequence[str]
) -> None:
    """One view per table of ``tables`` over the runs' own files; columns a file lacks
    (written before they existed) are null, and ``runs`` gets each run's ``folder`` and
    ``run_dir``; the other tables' views are empty."""
    top, resolved = str(root), str(root.resolve())
    rels = [_rel(top, p) for p in summarized]
    where = pa.table(
        {
            "_path": pa.array(summarized, pa.string()),
            "_folder": pa.array([_folder(r) for r in rels], pa.string()),
            "_run_dir": pa.array([os.path.join(resolved, r) for r in rels], pa.string()),
        }
    )
    con.register("_where", where)
    for name in TABLES:
        fname = run_file(Path(), name).as_posix()
        files = [os.path.join(p, fname) for p in summarized] if name in tables else []
        files = [f for f in files if os.path.isfile(f)]
        con.register(f"_{name}_empty", empty_table(name))
        if not files:
            extra = ", NULL::VARCHAR AS folder" if name == "runs" else ""
            con.execute(f"CREATE VIEW {name} AS SELECT *{extra} FROM _{name}_empty")
            continue
        listed = "[" + ", ".join(_quote(f) for f in files) + "]"
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


def _cache_views(con: duckdb.DuckDBPyConnection, root: Path, tables: Sequence[str]) -> None:
    for name in TABLES:
        if name not in tables:
            _empty_view(con, name, ", NULL::VARCHAR AS folder" if name == "runs" else "")
            continue
        path = _cache_dir(root) / f"{name}.parquet"
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet({_quote(str(path))})")


def _reusable(root: Path, sources: dict[str, Any]) -> set[str]:
    """The runs (relative paths) whose rows the cache holds unchanged: same results
    folder, same ``run.parquet`` (size and time)."""
    try:
        held = json.loads((_cache_dir(root) / SOURCES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(held, dict) or any(
        held.get(k) != sources[k] for k in ("format_version", "results_dir")
    ):
        return set()
    if not all((_cache_dir(root) / f"{t}.parquet").is_file() for t in TABLES):
        return set()
    old = held.get("runs") or {}
    return {rel for rel, stat in sources["runs"].items() if old.get(rel) == stat}


def _kept_ids(con: duckdb.DuckDBPyConnection, root: Path, reuse: set[str]) -> list[str] | None:
    """The run ids (as the rows have them) of the runs kept from the cache; None when
    they cannot stand for those runs alone (the tables other than ``runs`` know a run by
    its id): two kept runs share one, a run read in place or one the cache held and is
    gone has one of them."""
    resolved = str(root.resolve())
    dirs = pa.table({"run_dir": pa.array([os.path.join(resolved, r) for r in reuse], pa.string())})
    con.register("_kept_dirs", dirs)
    runs = _quote(str(_cache_dir(root) / "runs.parquet"))
    kept = [
        r[0]
        for r in con.execute(
            f"SELECT run_id FROM read_parquet({runs}) WHERE run_dir IN "
            "(SELECT run_dir FROM _kept_dirs)"
        ).fetchall()
    ]
    fresh = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    if len(kept) != len(reuse) or len(set(kept)) != len(kept) or fresh & set(kept):
        return None
    con.register("_kept_ids", pa.table({"run_id": pa.array(kept, pa.string())}))
    ((held,),) = con.execute(
        f"SELECT count(*) FROM read_parquet({runs}) WHERE run_id IN (SELECT run_id FROM _kept_ids)"
    ).fetchall()
    if held != len(kept):  # a run gone from the folder had one of their ids
        return None
    return kept


def _write_cache(root: Path, summarized: list[str], sources: dict[str, Any]) -> bool:
    """Every run's rows into the cache (False when it cannot be written): the rows it
    holds of runs unchanged since, and the others' read in place. Its list of sources is
    written last (and removed first), so a cache half written is never taken for a fresh
    one."""
    cache = _cache_dir(root)
    reuse = _reusable(root, sources)
    con = duckdb.connect(":memory:")
    try:
        changed = [p for p in summarized if _rel(str(root), p) not in reuse]
        _in_place_views(con, root, changed, TABLES)
        kept = _kept_ids(con, root, reuse) if reuse else []
        if kept is None:  # rebuilt from every run
            reuse, kept = set(), []
            con.close()
            con = duckdb.connect(":memory:")
            _in_place_views(con, root, summarized, TABLES)
        con.register("_reuse", pa.table({"run_id": pa.array(kept, pa.string())}))
        cache.mkdir(parents=True, exist_ok=True)
        (cache / SOURCES).unlink(missing_ok=True)
        for name in TABLES:
            rows = f"SELECT * FROM {name}"
            if reuse:
                held = _quote(str(cache / f"{name}.parquet"))
                rows = (
                    f"SELECT * FROM read_parquet({held}) WHERE run_id IN "
                    f"(SELECT run_id FROM _reuse) UNION ALL BY NAME {rows}"
                )
            tmp = cache / f".{name}.parquet.tmp{os.getpid()}"
            con.execute(f"COPY ({rows}) TO {_quote(str(tmp))} (FORMAT parquet, COMPRESSION zstd)")
            os.replace(tmp, cache / f"{name}.parquet")
        tmp = cache / f".{SOURCES}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(sources), encoding="utf-8")
        os.replace(tmp, cache / SOURCES)
        return True
    except (OSError, duckdb.Error) as err:  # a read-only results folder: no cache
        LOG.info("%s: cache not written (%s)", cache, str(err).splitlines()[0])
        return False
    finally:
        con.close()


def _archives_view(con: duckdb.DuckDBPyConnection, root: Path, found: Found) -> None:
    done = set(found.summarized_paths)
    top, resolved = str(root), str(root.resolve())
    rels = [_rel(top, p) for p in found.run_paths]
    con.register(
        "_archives",
        pa.table(
            {
                "run_id": pa.array([os.path.basename(r) for r in rels], pa.string()),
                "folder": pa.array([_folder(r) for r in rels], pa.string()),
                "run_dir": pa.array([os.path.join(resolved, r) for r in rels], pa.string()),
                "summarized": pa.array([p in done for p in found.run_paths], pa.bool_()),
            }
        ),
    )
    con.execute("CREATE VIEW archives AS SELECT * FROM _archives")


def tables_in(sql: str) -> list[str]:
    """The views ``sql`` names (a word of it), so that only those read any file."""
    words = set(re.findall(r"[a-z_]+", sql.lower()))
    return [t for t in TABLES if t in words]


def connect(
    results_dir: Path | str, use_cache: bool = True, tables: Sequence[str] = TABLES
) -> tuple[duckdb.DuckDBPyConnection, Found]:
    """An in-memory DuckDB with the views over every run under ``results_dir`` (those of
    ``tables`` read files, the others are empty), and what was found. The cache answers
    when it holds exactly the runs found; when it does not it is rewritten first (and
    when it cannot be, the views read in place). ``use_cache=False`` reads in place and
    leaves the cache alone."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ArchiveError(f"{root}: no such results directory")
    runs = _walk(str(root))
    summarized, stats = _stat_runs(str(root), runs)
    con = duckdb.connect(":memory:")
    sources: dict[str, Any] = {}
    if use_cache and summarized:
        sources = {
            "format_version": CACHE_VERSION,
            "results_dir": str(root.resolve()),
            "runs": stats,
        }
    fresh = bool(sources) and _cache_fresh(root, sources)
    if sources and not fresh:
        fresh = _write_cache(root, summarized, sources)
    if fresh:
        _cache_views(con, root, tables)
        found = Found(root, runs, summarized, "cache")
    else:
        _in_place_views(con, root, summarized, tables)
        found = Found(root, runs, summarized, "in place")
    _archives_view(con, root, found)
    return con, found


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
