"""Runs found where they lie: at any depth under --results, with their folder; `mqlab
query` reads their own summaries in place, and the cache never answers with fewer runs
than the archives hold."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from mqlab import cli
from mqlab.analysis import inplace, querycache
from mqlab.analysis.catalog import CATALOG_DIR, run_file, write_run_tables
from mqlab.analysis.schema import TABLES
from mqlab.archive import layout
from mqlab.cli import data as cli_data
from mqlab.report import compare, listing, query
from tests.fixtures.committed import committed_runs, tracked

from .archive import START_MS, write_tiny_run
from .conftest import Lab


def _nested(lab: Lab, root: Path) -> dict[str, str]:
    """The lab's two runs copied two and three folders deep; run id -> folder."""
    where = {lab.complete.run_id: "seeds/a", lab.no_delivery.run_id: "b/c/d"}
    for r in (lab.complete, lab.no_delivery):
        shutil.copytree(r.run_dir, root / where[r.run_id] / r.run_id)
    return where


def test_runs_are_found_at_any_depth_with_their_folder(lab: Lab, tmp_path: Path) -> None:
    where = _nested(lab, tmp_path)
    (tmp_path / ".hidden" / "x").mkdir(parents=True)
    shutil.copytree(lab.complete.run_dir, tmp_path / ".hidden" / "x" / "copy")
    found = inplace.find_all_runs(tmp_path)
    assert {p.name: inplace.folder_of(p, tmp_path) for p in found} == where
    listed = listing.list_runs(tmp_path)
    assert {x.info.run_id: listing.row(x)["folder"] for x in listed} == where
    columns, rows = listing.table([listing.row(x) for x in listed])
    assert columns[:2] == ["Run", "Folder"] and {r[1] for r in rows} == set(where.values())


def test_query_reads_the_summaries_in_place_with_no_catalog(lab: Lab, tmp_path: Path) -> None:
    where = _nested(lab, tmp_path)
    assert not (tmp_path / CATALOG_DIR).exists()
    columns, rows = query.run_query(
        tmp_path, "SELECT run_id, folder, sender_threads FROM runs ORDER BY run_id", False
    )
    expected = []
    for r in (lab.complete, lab.no_delivery):
        row = pq.read_table(run_file(r.run_dir, "runs")).to_pylist()[0]
        expected.append((r.run_id, where[r.run_id], row["sender_threads"]))
    assert rows == sorted(expected)
    assert not (tmp_path / CATALOG_DIR).exists()  # use_cache=False writes nothing
    # every table has the rows of both runs' own files
    for table in ("windows", "timeline", "delivery"):
        _, rows = query.run_query(tmp_path, f"SELECT count(*) FROM {table}", False)
        own = sum(
            pq.read_table(run_file(r.run_dir, table)).num_rows
            for r in (lab.complete, lab.no_delivery)
        )
        assert rows == [(own,)], table


def _cached_runs(root: Path) -> list[str]:
    doc = json.loads((root / CATALOG_DIR / querycache.CACHE_DIR / querycache.SOURCES).read_text())
    return sorted(Path(p).name for p in doc["runs"])


def test_the_cache_never_answers_with_fewer_runs(lab: Lab, tmp_path: Path) -> None:
    _nested(lab, tmp_path)
    count = "SELECT count(*) FROM runs"
    both = sorted([lab.complete.run_id, lab.no_delivery.run_id])
    _cols, rows, found = query.run_query_found(tmp_path, count)
    assert rows == [(2,)] and found.source == "cache" and _cached_runs(tmp_path) == both
    # a third run, summarized (a copy of the first under another name and folder)
    third = tmp_path / "later" / (lab.complete.run_id + "-copy")
    shutil.copytree(lab.complete.run_dir, third)
    _cols, rows, found = query.run_query_found(tmp_path, count)
    assert rows == [(3,)] and _cached_runs(tmp_path) == sorted([*both, third.name])
    # the cache kept the first two runs' rows and read the third's: every table whole
    for table in ("windows", "timeline", "delivery", "latency"):
        own = sum(
            pq.read_table(run_file(d, table)).num_rows
            for d in (lab.complete.run_dir, lab.no_delivery.run_dir, third)
        )
        _cols, rows, found = query.run_query_found(tmp_path, f"SELECT count(*) FROM {table}")
        assert rows == [(own,)] and found.source == "cache", table
    _cols, rows, _found = query.run_query_found(
        tmp_path, "SELECT run_id, folder FROM runs ORDER BY run_id"
    )
    assert (lab.complete.run_id, "later") in rows and len(rows) == 3  # the copy keeps its id
    # a run re-summarized (its run.parquet rewritten): the cache is rewritten too
    held = (tmp_path / CATALOG_DIR / querycache.CACHE_DIR / querycache.SOURCES).read_text()
    os.utime(run_file(third, "runs"), ns=(1, 1))
    _cols, rows, found = query.run_query_found(tmp_path, count)
    assert rows == [(3,)]
    assert (tmp_path / CATALOG_DIR / querycache.CACHE_DIR / querycache.SOURCES).read_text() != held
    # a run removed: the cache does not keep it
    shutil.rmtree(third)
    _cols, rows, found = query.run_query_found(tmp_path, count)
    assert rows == [(2,)] and _cached_runs(tmp_path) == both
    # the same answers in place, the cache left alone
    _cols, rows, found = query.run_query_found(tmp_path, count, use_cache=False)
    assert rows == [(2,)] and found.source == "in place"


def test_a_cache_that_cannot_be_written_leaves_the_answer_in_place(
    lab: Lab, tmp_path: Path
) -> None:
    _nested(lab, tmp_path)
    (tmp_path / CATALOG_DIR).write_text("a file where the cache folder would go")
    _cols, rows, found = query.run_query_found(tmp_path, "SELECT count(*) FROM runs")
    assert rows == [(2,)] and found.source == "in place"


def test_a_damaged_cache_is_never_the_answer(lab: Lab, tmp_path: Path) -> None:
    """The cache's database damaged under a listing that still matches: the answer comes
    from the archives, and once a run changes the cache is written anew (not from the
    damaged rows)."""
    _nested(lab, tmp_path)
    count = "SELECT count(*) FROM runs"
    _cols, rows, found = query.run_query_found(tmp_path, count)
    assert rows == [(2,)] and found.source == "cache"
    database = tmp_path / CATALOG_DIR / querycache.CACHE_DIR / querycache.DATABASE
    database.write_bytes(b"not a database" * 100)
    _cols, rows, found = query.run_query_found(tmp_path, count)
    assert rows == [(2,)] and found.source == "in place"
    moved = next(tmp_path.glob(f"*/*/{lab.complete.run_id}"))
    os.utime(run_file(moved, "runs"), ns=(1, 1))  # re-summarized: the cache is rewritten
    _cols, rows, found = query.run_query_found(tmp_path, "SELECT count(*) FROM timeline")
    own = sum(
        pq.read_table(run_file(r.run_dir, "timeline")).num_rows
        for r in (lab.complete, lab.no_delivery)
    )
    assert rows == [(own,)] and found.source == "cache"
    assert not [p.name for p in database.parent.iterdir() if ".tmp" in p.name]


def test_a_run_without_a_summary_is_listed_as_such(lab: Lab, tmp_path: Path) -> None:
    _nested(lab, tmp_path)
    never = write_tiny_run(tmp_path / "x", start_ms=START_MS + 120_000)
    _cols, rows, found = query.run_query_found(
        tmp_path, "SELECT run_id, folder, summarized FROM archives ORDER BY run_id"
    )
    assert (never.run_id, "x", False) in rows and len(rows) == 3
    assert found.not_summarized == [never.run_dir]


def test_compare_finds_a_run_in_a_subfolder_by_id(lab: Lab, tmp_path: Path) -> None:
    where = _nested(lab, tmp_path)
    run = compare.resolve_run(lab.no_delivery.run_id, tmp_path)
    assert run["folder"] == where[lab.no_delivery.run_id]
    assert Path(run["run_dir"]) == (tmp_path / "b/c/d" / lab.no_delivery.run_id).resolve()
    res = CliRunner().invoke(
        cli_data.compare, ["--results", str(tmp_path), lab.complete.run_id, lab.no_delivery.run_id]
    )
    assert res.exit_code == 0, res.output
    assert f"{lab.complete.run_id} in seeds/a" in res.stdout


def test_every_committed_run_is_listed_and_queried(tmp_path: Path) -> None:
    """The repository's results/ as a fresh clone has it: ls and query see every run
    whose manifest git tracks, with no summarize step."""
    committed = committed_runs("results/**")
    assert len(committed) > 100
    results = tmp_path / "results"
    for path in committed:
        rel = path.relative_to(Path(__file__).resolve().parents[2] / "results")
        for f in tracked(f"results/{rel}/**"):
            dest = results / rel / f.relative_to(path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest)
    res = CliRunner().invoke(cli.main, ["ls", "--results", str(results), "--json"])
    assert res.exit_code == 0, res.output
    dec, ids, i, text = json.JSONDecoder(), [], 0, res.stdout
    while text[i:].strip():
        i += len(text[i:]) - len(text[i:].lstrip())
        doc, i = dec.raw_decode(text, i)
        ids.append(doc["run_id"])
    assert sorted(ids) == sorted(p.name for p in committed)
    res = CliRunner().invoke(
        cli_data.query, ["--results", str(results), "--csv", "SELECT count(*) AS n FROM runs"]
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[1] == str(len(committed))
    assert res.stderr == ""
    assert all((p / layout.SUMMARY_DIR).is_dir() for p in committed)


def test_the_cache_keeps_the_rows_of_the_runs_unchanged(lab: Lab, tmp_path: Path) -> None:
    """One run re-summarized: the cache is rewritten with its rows read anew and the
    other run's kept, and answers (it is not left for reading in place)."""
    _nested(lab, tmp_path)
    sql = "SELECT run_id, folder FROM runs ORDER BY run_id"
    _cols, before, found = query.run_query_found(tmp_path, sql)
    assert found.source == "cache"
    moved = tmp_path / "b/c/d" / lab.no_delivery.run_id
    os.utime(run_file(moved, "runs"))
    _cols, after, found = query.run_query_found(tmp_path, sql)
    assert found.source == "cache" and after == before
    for table in ("windows", "timeline", "latency", "delivery", "faults"):
        _cols, cached, _found = query.run_query_found(tmp_path, f"SELECT count(*) FROM {table}")
        _cols, placed, _found = query.run_query_found(
            tmp_path, f"SELECT count(*) FROM {table}", use_cache=False
        )
        assert cached == placed, table


def test_the_next_query_sees_every_change_to_the_archives(lab: Lab, tmp_path: Path) -> None:
    """The cache's check costs one stat a run it knows: a new run (one whose directory
    was there before its manifest, too), a removed run, a re-summarized run and a run
    whose summary is gone are each seen by the next query."""
    _nested(lab, tmp_path)
    sql = "SELECT run_id, send_msgs_per_s FROM runs ORDER BY run_id"
    _cols, before, found = query.run_query_found(tmp_path, sql)
    assert found.source == "cache" and len(before) == 2
    # re-summarized as `mqlab summarize` does it: new files renamed over the old ones
    run_dir = tmp_path / "seeds/a" / lab.complete.run_id
    tables = {t: pq.read_table(run_file(run_dir, t)) for t in TABLES}
    runs = tables["runs"]
    i = runs.schema.get_field_index("send_msgs_per_s")
    tables["runs"] = runs.set_column(i, "send_msgs_per_s", pa.array([12345.5]))
    write_run_tables(run_dir, tables)
    _cols, rows, found = query.run_query_found(tmp_path, sql)
    assert found.source == "cache" and (lab.complete.run_id, 12345.5) in rows
    # a run directory written before its manifest: a folder first, a run once it has one
    later = tmp_path / "seeds/a" / (lab.complete.run_id + "-later")
    shutil.copytree(run_dir, later)
    (later / layout.MANIFEST).rename(tmp_path / "manifest.aside")
    _cols, rows, found = query.run_query_found(tmp_path, sql)
    assert len(rows) == 2 and later not in found.runs
    (tmp_path / "manifest.aside").rename(later / layout.MANIFEST)
    _cols, rows, found = query.run_query_found(tmp_path, sql)
    assert len(rows) == 3 and later in found.runs and found.source == "cache"
    # its summary removed: listed as a run without summary, no rows
    shutil.rmtree(later / layout.SUMMARY_DIR)
    _cols, rows, found = query.run_query_found(tmp_path, sql)
    assert len(rows) == 2 and found.not_summarized == [later]
    # removed altogether: gone from every view
    shutil.rmtree(later)
    _cols, rows, found = query.run_query_found(
        tmp_path, "SELECT count(*) FROM archives UNION ALL SELECT count(*) FROM runs"
    )
    assert rows == [(2,), (2,)] and found.runs == sorted(found.runs, key=lambda p: p.name)


def test_a_query_lists_the_runs_once(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query lists the archives once, whether the cache answers or, stale, is
    rewritten first (the listing made while the cache was tried is the one used)."""
    _nested(lab, tmp_path)
    scans: list[str] = []
    scan = inplace._scan

    def counted(root: str, known: frozenset[str]) -> tuple[list[str], list[str], list[str]]:
        scans.append(root)
        return scan(root, known)

    monkeypatch.setattr(inplace, "_scan", counted)
    count = "SELECT count(*) FROM runs"
    assert query.run_query(tmp_path, count)[1] == [(2,)]  # no cache yet: written
    assert query.run_query(tmp_path, count)[1] == [(2,)]  # the cache answers
    moved = next(tmp_path.glob(f"*/*/{lab.complete.run_id}"))
    os.utime(run_file(moved, "runs"), ns=(1, 1))  # stale: rewritten
    _cols, rows, found = query.run_query_found(tmp_path, count)
    assert rows == [(2,)] and found.source == "cache"
    assert len(scans) == 3, scans
