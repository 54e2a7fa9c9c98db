"""Every run archive under a results folder, at any depth, and DuckDB views over their
own Parquet summaries read where they lie (``RUN_DIR/summary/*.parquet``).

A run is a directory holding ``manifest.json``; the walk does not go into a run, nor
into hidden folders (``.catalog``). The folder a run sits in (relative to the results
folder, ``.`` for the top) is its ``folder``.

The views (``runs``, ``windows``, ``timeline``, ``latency``, ``delivery``, ``problems``,
``faults``; columns :data:`mqlab.analysis.schema.SCHEMAS`, ``latency`` without its
histograms, ``runs`` with ``folder`` and ``run_dir`` where the run is now) hold every
summarized run found, and the view ``archives`` every run found, summarized or not.

The cache (``RESULTS/.catalog/cache/``) holds the same tables concatenated (one DuckDB
database file, ``tables.duckdb``: DuckDB's own storage, read without decoding Parquet), with the
list of the summary files it was written from (each ``run.parquet``'s path, size and
modification time) and a fingerprint of that list. Every query lists the runs (one
``scandir`` a folder; one ``stat`` a run the cache knows, of its ``run.parquet``, which
sees a summary rewritten in place as well as one renamed over it) and the cache answers
only when the fingerprint of what it found is the one held, so it can never answer with
fewer or staler runs than the archives hold; otherwise it is rewritten first, keeping
the rows of the runs unchanged since and reading the others in place (and when the
folder cannot be written, the views read every run in place). A run the cache knows is
not asked for its manifest again while its summary is there."""

from __future__ import annotations

import contextlib
import hashlib
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
SOURCES = "sources.json"  # each summary's size and time, by path: what can be kept
LISTING = "listing.txt"  # the fingerprint of the sources, then the runs held, a line each
DATABASE = "tables.duckdb"  # the cached tables, in DuckDB's own storage format
CACHE_VERSION = 3
CACHED = "cache"  # the cache's name when attached to a connection
TOP = "."  # the folder of a run directly under the results folder
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


def _connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that prints no progress bar (a long first query writing the
    cache would draw one on the user's terminal, between mqlab's own lines)."""
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    return con


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_RUN_PARQUET = os.sep + str(run_file(Path(), "runs"))  # /summary/run.parquet


def _rel(root: str, path: str) -> str:
    return path[len(root) :].lstrip(os.sep).replace(os.sep, "/")


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


def _cache_dir(root: Path) -> Path:
    return root / CATALOG_DIR / CACHE_DIR


def _held(root: Path) -> tuple[str, frozenset[str]]:
    """The cache's fingerprint and the runs it holds (relative paths); ("", {}) when
    there is no cache (or one half written)."""
    try:
        text = (_cache_dir(root) / LISTING).read_text(encoding="utf-8")
    except OSError:
        return "", frozenset()
    first, _, rest = text.partition("\n")
    return first, frozenset(rest.splitlines())


def _fingerprint(resolved: str, lines: list[str]) -> str:
    """One digest of the results folder and every summary's line (path, size, time)."""
    # DuckDB's storage format is its version's: a cache written by another is rewritten
    text = "\n".join([f"{CACHE_VERSION} {duckdb.__version__}", resolved, *lines])
    return hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=20).hexdigest()


def _cache_fresh(root: Path, held: str, fingerprint: str) -> bool:
    return bool(held) and held == fingerprint and (_cache_dir(root) / DATABASE).is_file()


def _attach(con: duckdb.DuckDBPyConnection, path: Path, name: str) -> None:
    con.execute(f"ATTACH {_quote(str(path))} AS {name} (READ_ONLY)")


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
    """The views over the cache's tables (attached read-only; a cache replaced meanwhile
    is read as it was when attached)."""
    if any(t in TABLES for t in tables):
        _attach(con, _cache_dir(root) / DATABASE, CACHED)
    for name in TABLES:
        if name not in tables:
            _empty_view(con, name, ", NULL::VARCHAR AS folder" if name == "runs" else "")
            continue
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM {CACHED}.{name}")


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
    if not (_cache_dir(root) / DATABASE).is_file():
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


def _write_cache(root: Path, summarized: list[str], sources: dict[str, Any], listing: str) -> bool:
    """Every run's rows into the cache (False when it cannot be written): the rows it
    holds of runs unchanged since, and the others' read in place. The database is written
    beside the old one and renamed over it (a query reading the old one goes on reading
    it); its list of sources and its listing are written last (and removed first), so a
    cache half written is never taken for a fresh one. DuckDB's own storage, not Parquet:
    a cache is read often, and a query over 6,000,000 rows spends less time reading
    DuckDB's blocks than decoding Parquet's pages."""
    cache = _cache_dir(root)
    database = cache / DATABASE
    reuse = _reusable(root, sources)
    tmp_db = cache / f".{DATABASE}.tmp{os.getpid()}"
    con = _connect()
    try:
        changed = [p for p in summarized if _rel(str(root), p) not in reuse]
        _in_place_views(con, root, changed, TABLES)
        kept: list[str] | None = []
        if reuse:
            try:
                _attach(con, database, "old")
                kept = _kept_ids(con, root, reuse)
            except duckdb.Error:  # not a database this DuckDB reads: every run anew
                kept = None
        if kept is None:  # rebuilt from every run
            reuse, kept = set(), []
            con.close()
            con = _connect()
            _in_place_views(con, root, summarized, TABLES)
        con.register("_reuse", pa.table({"run_id": pa.array(kept, pa.string())}))
        cache.mkdir(parents=True, exist_ok=True)
        (cache / LISTING).unlink(missing_ok=True)
        (cache / SOURCES).unlink(missing_ok=True)
        for leftover in (tmp_db, Path(f"{tmp_db}.wal")):
            leftover.unlink(missing_ok=True)
        con.execute(f"ATTACH {_quote(str(tmp_db))} AS new")
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
        os.replace(tmp_db, database)
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


def _archives_view(
    con: duckdb.DuckDBPyConnection, root: Path, found: Found, tables: Sequence[str]
) -> None:
    """The view ``archives``: every run found (empty when ``tables`` does not name it)."""
    paths = found.run_paths if ARCHIVES in tables else []
    done = set(found.summarized_paths)
    top, resolved = str(root), str(root.resolve())
    rels = [_rel(top, p) for p in paths]
    con.register(
        "_archives",
        pa.table(
            {
                "run_id": pa.array([os.path.basename(r) for r in rels], pa.string()),
                "folder": pa.array([_folder(r) for r in rels], pa.string()),
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


def connect(
    results_dir: Path | str, use_cache: bool = True, tables: Sequence[str] = VIEWS
) -> tuple[duckdb.DuckDBPyConnection, Found]:
    """An in-memory DuckDB with the views over every run under ``results_dir`` (those of
    ``tables`` read files, the others are empty), and what was found. The cache answers
    when it holds exactly the runs found; when it does not it is rewritten first (and
    when it cannot be, the views read in place). ``use_cache=False`` reads in place and
    leaves the cache alone."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ArchiveError(f"{root}: no such results directory")
    held, known = _held(root) if use_cache else ("", frozenset[str]())
    runs, summarized, lines = _scan(str(root), known)
    con = _connect()
    fresh = False
    if use_cache and summarized:
        resolved = str(root.resolve())
        fingerprint = _fingerprint(resolved, lines)
        fresh = _cache_fresh(root, held, fingerprint)
        if not fresh:
            stats = {}
            for line in lines:
                rel, size, mtime = line.rsplit("\t", 2)
                stats[rel] = [int(size), int(mtime)]
            sources = {"format_version": CACHE_VERSION, "results_dir": resolved, "runs": stats}
            listing = "\n".join([fingerprint, *(_rel(str(root), p) for p in summarized)])
            fresh = _write_cache(root, summarized, sources, listing)
    if fresh:
        try:
            _cache_views(con, root, tables)
        except duckdb.Error as err:  # unreadable (damaged, or gone since): read in place
            LOG.info("%s: cache not read (%s)", _cache_dir(root), str(err).splitlines()[0])
            con.close()
            con = _connect()
            fresh = False
    if fresh:
        found = Found(root, runs, summarized, "cache")
    else:
        _in_place_views(con, root, summarized, tables)
        found = Found(root, runs, summarized, "in place")
    _archives_view(con, root, found, tables)
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
