"""Benchmark: DuckDB (``mqlab query``) over a catalog of 10,000 runs.

Builds a catalog with the real schemas (10,000 runs, 10 one-minute windows each,
10 sender ids each) and times every README example query end to end as
``mqlab query`` runs it (open DuckDB, create the views, run, fetch), median of
5. Reference run in the same invocation: the same queries over a 100-run catalog.
Goal: every query under 200 ms on 10,000 runs.

    uv run --frozen python bench/query.py [--runs 10000]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mqlab.results.catalog import catalog_file, empty_table
from mqlab.results.query import EXAMPLES, run_query
from mqlab.results.tables import TABLES

GOAL_MS = 200.0
BROKERS = ("nats", "postgres", "redis", "rabbitmq", "kafka", "sqs")


def _row(schema: pa.Schema, **values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in schema:
        if f.name in values:
            out[f.name] = values[f.name]
        elif pa.types.is_string(f.type):
            out[f.name] = ""
        elif pa.types.is_floating(f.type):
            out[f.name] = random.uniform(100, 50000)
        else:
            out[f.name] = random.randint(0, 100000)
    return out


def build_catalog(root: Path, n_runs: int) -> None:
    random.seed(n_runs)
    schemas = {t: empty_table(t).schema for t in TABLES}
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    for i in range(n_runs):
        rid = f"2026-01-01T00-00-00Z_bench-{i}"
        rows["runs"].append(_row(schemas["runs"], run_id=rid, broker=random.choice(BROKERS),
                                 scenario="bench", format_version=1,
                                 started_at=f"2026-01-01T00:00:{i % 60:02d}Z",
                                 sender_threads=random.choice((1, 5, 25)),
                                 sender_nodes=random.choice((1, 2, 4)),
                                 receiver_nodes=random.choice((2, 4, 8))))
        for w in range(10):
            rows["windows"].append(_row(schemas["windows"], run_id=rid, window_index=w))
        for m in ("send_call_us", "send_msg_us", "processing_us"):
            for w in [None, *range(10)]:
                rows["latency"].append(_row(schemas["latency"], run_id=rid, metric=m,
                                            window_index=w))
        for s in range(10):
            rows["delivery"].append(_row(schemas["delivery"], run_id=rid, sender_id=s))
    for t in TABLES:
        path = catalog_file(root, t)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows[t], schema=schemas[t]), path)


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
            print(f"example {i}: {args.runs:,} runs {b:6.1f} ms | reference "
                  f"{args.reference_runs} runs {s:6.1f} ms | ratio {b / s:.2f}")
        worst = max(big_ms)
        print(f"slowest: {worst:.1f} ms; goal < {GOAL_MS:.0f} ms: "
              f"{'met' if worst < GOAL_MS else 'NOT met'}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
