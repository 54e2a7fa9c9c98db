"""Benchmark: DuckDB (``mqlab query``) over a catalog of 10,000 runs.

Builds a catalog with the real schemas (10,000 runs of 10 minutes: 10 one-minute
windows, 600 timeline seconds, 5 latency metrics and 10 sender ids each: 6,000,000
timeline rows) and times every README example query end to end as
``mqlab query`` runs it (open DuckDB, create the views, run, fetch), median of
5. Reference run in the same invocation: the same queries over a 100-run catalog.
Goal: every query under 200 ms on 10,000 runs.

    .venv/bin/python bench/query.py [--runs 10000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from mqlab.analysis.catalog import update_catalog
from mqlab.analysis.schema import SCHEMAS
from mqlab.archive.formats import FORMAT_VERSION
from mqlab.archive.layout import METRICS
from mqlab.report.query import EXAMPLES, run_query

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


def build_catalog(root: Path, n_runs: int) -> None:
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
    update_catalog(root, [tables])  # written as `mqlab summarize` writes it


def time_queries(root: Path) -> list[float]:
    out = []
    for sql in EXAMPLES:
        samples = []
        for _ in range(5):
            t = time.perf_counter()
            run_query(root, sql)
            samples.append((time.perf_counter() - t) * 1000)
        out.append(statistics.median(samples))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--reference-runs", type=int, default=100)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mqlab-bench-q-"))
    try:
        big, small = tmp / "big", tmp / "small"
        t = time.perf_counter()
        build_catalog(big, args.runs)
        build_catalog(small, args.reference_runs)
        print(f"catalogs built in {time.perf_counter() - t:.1f} s")
        big_ms, small_ms = time_queries(big), time_queries(small)
        for i, (b, s) in enumerate(zip(big_ms, small_ms, strict=True), 1):
            print(
                f"example {i}: {args.runs:,} runs {b:6.1f} ms | reference "
                f"{args.reference_runs} runs {s:6.1f} ms | ratio {b / s:.2f}"
            )
        worst = max(big_ms)
        print(
            f"slowest: {worst:.1f} ms; goal < {GOAL_MS:.0f} ms: "
            f"{'met' if worst < GOAL_MS else 'NOT met'}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
