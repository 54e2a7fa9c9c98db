"""Benchmark: DuckDB (``mqlab query``) over 10,000 run archives.

Writes 10,000 run directories with the real schemas (runs of 10 minutes: 10 one-minute
windows, 600 timeline seconds, 5 latency metrics and 10 sender ids each: 6,000,000
timeline rows), each with its manifest and its own ``summary/*.parquet`` as `mqlab
summarize` writes them, in 100 folders of 100 runs. Times every README example query end
to end as ``mqlab query`` runs it (find the runs, open DuckDB, create the views, run,
fetch), median of 5 (one sample in place over 10,000 runs), two ways: reading every
run's own files in place, and through the cache (``RESULTS/.catalog/cache``, taken
only when it holds exactly the runs found, which is checked on every query), and the
query after one run is re-summarized (the cache refreshed, the others' rows kept).
References in the same invocation: the same over 100 runs, and the same queries over
the cache's files with no check (the floor; the ratio is what the check costs), and
the check alone. Goal: every query under
200 ms on 10,000 runs (the cached path, which `mqlab query` takes once the cache is
written).

    .venv/bin/python bench/query.py [--runs 10000] [--cache-only] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from mqlab.analysis import inplace, querycache
from mqlab.analysis.catalog import CATALOG_DIR, run_file, write_run_tables
from mqlab.analysis.schema import SCHEMAS, TABLES
from mqlab.archive.formats import FORMAT_VERSION
from mqlab.archive.layout import MANIFEST, METRICS
from mqlab.report.query import EXAMPLES, run_query, run_query_found

GOAL_MS = 200.0
WINDOWS = 10  # one-minute windows per run
SECONDS = 600  # timeline rows per run
BROKERS = ("nats", "postgres", "redis", "rabbitmq", "kafka", "sqs")


def _table(schema: pa.Schema, n: int, rng: np.random.Generator, **given: Any) -> pa.Table:
    """n rows: the given columns, random figures for every other column."""
    cols = []
    for f in schema:
        if f.name in given:
            cols.append(pa.array(given[f.name], f.type))
        elif pa.types.is_string(f.type):
            cols.append(pa.array(np.full(n, ""), f.type))
        elif pa.types.is_floating(f.type):
            cols.append(pa.array(rng.uniform(100, 50000, n), f.type))
        else:
            cols.append(pa.array(rng.integers(0, 100000, n), f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def build_runs(root: Path, n_runs: int) -> None:
    rng = np.random.default_rng(n_runs)
    schemas = SCHEMAS
    ids = np.array([f"2026-01-01T00-00-00Z_bench-{i}" for i in range(n_runs)])
    tables = {
        "runs": _table(
            schemas["runs"],
            n_runs,
            rng,
            run_id=ids,
            format_version=np.full(n_runs, FORMAT_VERSION),
            broker=rng.choice(BROKERS, n_runs),
            scenario=np.full(n_runs, "bench"),
            started_at=np.array([f"2026-01-01T00:00:{i % 60:02d}Z" for i in range(n_runs)]),
            sender_threads=rng.choice((1, 5, 25), n_runs),
            sender_nodes=rng.choice((1, 2, 4), n_runs),
            receiver_nodes=rng.choice((2, 4, 8), n_runs),
        ),
        "windows": _table(
            schemas["windows"],
            n_runs * WINDOWS,
            rng,
            run_id=np.repeat(ids, WINDOWS),
            window_index=np.tile(np.arange(WINDOWS), n_runs),
        ),
        "timeline": _table(
            schemas["timeline"],
            n_runs * SECONDS,
            rng,
            run_id=np.repeat(ids, SECONDS),
            second_ms=np.tile(1_767_225_600_000 + 1000 * np.arange(SECONDS), n_runs),
        ),
        "latency": _table(
            schemas["latency"],
            n_runs * len(METRICS) * (WINDOWS + 1),
            rng,
            run_id=np.repeat(ids, len(METRICS) * (WINDOWS + 1)),
            metric=np.tile(np.repeat(METRICS, WINDOWS + 1), n_runs),
            window_index=np.tile(np.arange(-1, WINDOWS), n_runs * len(METRICS)),
        ),
        "delivery": _table(
            schemas["delivery"],
            n_runs * 10,
            rng,
            run_id=np.repeat(ids, 10),
            sender_id=np.tile(np.arange(10), n_runs),
        ),
        "problems": schemas["problems"].empty_table(),
    }
    # the measured-period rows of `latency` have window_index NULL
    lat = tables["latency"]
    w = lat["window_index"]
    idx = lat.schema.get_field_index("window_index")
    nulled = pa.compute.if_else(pa.compute.equal(w, -1), pa.scalar(None, pa.int64()), w)
    tables["latency"] = lat.set_column(idx, "window_index", nulled)
    # each run's own tables in its own directory, as `mqlab summarize` writes them
    meta = {k: v.schema.metadata for k, v in tables.items()}
    for i, run_id in enumerate(ids):
        run_dir = root / f"folder-{i % 100:03d}" / run_id
        run_dir.mkdir(parents=True)
        (run_dir / MANIFEST).write_text(f'{{"format_version": {FORMAT_VERSION}}}')
        per_run = {}
        for name in TABLES:
            t = tables.get(name, SCHEMAS[name].empty_table())
            k = t.num_rows // n_runs  # the rows of one run (the tables are in run order)
            t = t.slice(i * k, k)
            per_run[name] = t.replace_schema_metadata(meta.get(name) or t.schema.metadata)
        write_run_tables(run_dir, per_run)


def _unchecked(root: Path, sql: str) -> None:
    """``sql`` over the cache's files with no look at the archives (what the catalog of
    2026-11-22 did): the floor under a checked query."""
    con = duckdb.connect(":memory:")
    try:
        querycache.cache_views(con, root, inplace.tables_in(sql))
        con.execute(sql).fetchall()
    finally:
        con.close()


def time_unchecked(root: Path, samples_n: int = 5) -> list[float]:
    out = []
    for sql in EXAMPLES:
        samples = []
        for _ in range(samples_n):
            t = time.perf_counter()
            _unchecked(root, sql)
            samples.append((time.perf_counter() - t) * 1000)
        out.append(statistics.median(samples))
    return out


def time_check(root: Path, samples_n: int = 5) -> float:
    """The freshness check alone: list the runs, stat each summary, fingerprint."""
    samples = []
    for _ in range(samples_n):
        t = time.perf_counter()
        held, known = querycache.held(root)
        _runs, _summarized, lines = inplace._scan(str(root), known)
        assert querycache.fingerprint(str(root.resolve()), lines) == held
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def time_queries(root: Path, use_cache: bool, samples_n: int = 5) -> list[float]:
    if use_cache:
        run_query(root, "SELECT 1", True)  # writes the cache (once, as a first query does)
        _con, found = inplace.connect(root)
        assert found.source == "cache", found.source
    out = []
    for sql in EXAMPLES:
        samples = []
        for _ in range(samples_n):
            t = time.perf_counter()
            run_query(root, sql, use_cache)
            samples.append((time.perf_counter() - t) * 1000)
        out.append(statistics.median(samples))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--reference-runs", type=int, default=100)
    p.add_argument(
        "--cache-only",
        action="store_true",
        help="skip the in-place timings over the big folder (minutes on 10,000 runs)",
    )
    p.add_argument(
        "--keep",
        metavar="DIR",
        help="write the run archives into DIR/big and DIR/small and keep them; "
        "a later run with the same DIR reuses them (tens of minutes on a busy machine)",
    )
    args = p.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="mqlab-bench-q-"))
    try:
        big, small = tmp / "big", tmp / "small"
        t = time.perf_counter()
        for where, n in ((big, args.runs), (small, args.reference_runs)):
            if not where.is_dir():
                build_runs(where, n)
            elif len(inplace.find_all_runs(where)) != n:
                raise SystemExit(f"{where}: holds other than {n} runs; give another --keep")
        print(f"run archives ready in {time.perf_counter() - t:.1f} s")
        listing = big / CATALOG_DIR / querycache.CACHE_DIR / querycache.LISTING
        before = listing.stat().st_mtime_ns if listing.is_file() else None
        t = time.perf_counter()
        run_query(big, "SELECT 1", True)
        took = (time.perf_counter() - t) * 1000
        if before is None or listing.stat().st_mtime_ns != before:
            print(
                f"first query over {args.runs:,} runs (reads in place, writes the cache): "
                f"{took:.0f} ms"
            )
        # in place over the big folder: one sample each (each reads thousands of files)
        small_place = time_queries(small, False)
        big_place = (
            [float("nan")] * len(EXAMPLES) if args.cache_only else time_queries(big, False, 1)
        )
        big_cache, small_cache = time_queries(big, True), time_queries(small, True)
        big_bare = time_unchecked(big)
        for i in range(len(EXAMPLES)):
            print(
                f"example {i + 1}: {args.runs:,} runs: in place {big_place[i]:7.1f} ms, "
                f"cache {big_cache[i]:6.1f} ms (x{big_place[i] / big_cache[i]:.0f}; "
                f"unchecked {big_bare[i]:6.1f} ms, x{big_cache[i] / big_bare[i]:.2f}) | "
                f"{args.reference_runs} runs: in place {small_place[i]:6.1f} ms, "
                f"cache {small_cache[i]:6.1f} ms"
            )
        print(
            f"the check before the cache answers (list {args.runs:,} runs, stat each "
            f"summary, fingerprint): {time_check(big):.1f} ms"
        )
        # one run re-summarized: the next query refreshes the cache, keeping the others
        first = sorted(big.glob("folder-000/*"))[0]
        os.utime(run_file(first, "runs"))
        t = time.perf_counter()
        _cols, _rows, found = run_query_found(big, EXAMPLES[0])
        print(
            f"a query after one of {args.runs:,} runs is re-summarized (the cache refreshed, "
            f"the other runs' rows kept): {(time.perf_counter() - t) * 1000:.0f} ms "
            f"({found.source})"
        )
        worst = max(big_cache)
        print(
            f"slowest through the cache: {worst:.1f} ms; goal < {GOAL_MS:.0f} ms: "
            f"{'met' if worst < GOAL_MS else 'NOT met'}; slowest in place: "
            f"{max(big_place):.1f} ms"
        )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
