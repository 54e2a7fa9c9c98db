"""The mqlab summary job (PySpark): raw run archives -> Parquet figures and the catalog.

Runs in-process with ``local[*]`` through ``mqlab summarize``, and unchanged on a
cluster::

    spark-submit --master spark://HOST:7077 spark/summarize.py --all /shared/results
    spark-submit --master spark://HOST:7077 spark/summarize.py --logs a.hlog b.hlog --json

Executors need the results directory at the same path (shared storage) and a Python
with mqlab installed (``pip install mqlab``, or ``--py-files`` plus hdrhistogram and
pyroaring). Every raw file is one task: executors read it, decode its histograms and
merge them per (run, metric, window); a second step merges those per key, again in
executors. Only figures (and one merged histogram per run and metric) reach the driver,
which writes ``RUN_DIR/summary/*.parquet`` and ``RESULTS_DIR/.catalog/*.parquet``.
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqlab.analysis import catalog, partials, plan, tables
from mqlab.analysis.job import DEFAULT_WINDOW_S, window_ms_of, write_run_outputs
from mqlab.errors import ArchiveError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG = logging.getLogger(__name__)

LOG_FIGURES = ("count", "p50", "p90", "p99", "p99_9", "max")


def build_session(
    master: str | None = "local[*]", app_name: str = "mqlab-summarize", shuffle_partitions: int = 4
) -> SparkSession:
    """A SparkSession; with a ``local`` master it binds to 127.0.0.1 and keeps its
    scratch files in a temp dir. ``master=None`` takes spark-submit's ``--master``."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
    scratch = tempfile.mkdtemp(prefix="mqlab-spark-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch}")
        .config("spark.local.dir", scratch)
    )
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            builder = builder.config("spark.driver.host", "127.0.0.1").config(
                "spark.driver.bindAddress", "127.0.0.1"
            )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@dataclass
class RunOutcome:
    run_id: str
    run_dir: str
    summary: dict[str, Any]  # summary.json
    problems: list[tuple[str, int | None, str]]


@dataclass
class JobOutcome:
    runs: list[RunOutcome] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # runs whose metadata was unreadable


def _run_rdd(spark: SparkSession, tasks: list[partials.Task]) -> dict[Any, Any]:
    """Process every task and finalize every key inside executors; collect the figures."""
    if not tasks:
        return {}
    sc = spark.sparkContext
    slices = max(1, min(len(tasks), sc.defaultParallelism * 32))
    # spread the expensive histogram logs evenly over the slices
    ordered = sorted(tasks, key=lambda t: t.kind not in ("hlog", "logfile"))
    rdd = sc.parallelize(ordered, slices)
    merged = (
        rdd.flatMap(partials.process_task)
        .groupByKey(max(2, sc.defaultParallelism * 2))
        .map(lambda kv: partials.finalize(kv[0], kv[1]))
    )
    return dict(merged.collect())


def summarize_runs(
    spark: SparkSession,
    run_dirs: Sequence[Path | str],
    window_s: float = DEFAULT_WINDOW_S,
    results_dir: Path | str | None = None,
) -> JobOutcome:
    """Summarize runs; write their Parquet and update the catalog of their results dir
    (``results_dir``, or each run's parent directory)."""
    window_ms = window_ms_of(window_s)
    outcome = JobOutcome()
    metas = []
    for d in run_dirs:
        try:
            metas.append(plan.read_run(d))
        except ArchiveError as err:
            LOG.warning("skipping %s: %s", d, err)
            outcome.skipped.append(f"{d}: {err}")
    tasks = [t for m in metas for t in plan.tasks_for(m, window_ms)]
    results = _run_rdd(spark, tasks)
    by_results_dir: dict[Path, list[dict[str, Any]]] = {}
    for m in metas:
        tbls = tables.build_tables(m, results, window_ms)
        summary = write_run_outputs(m.run_dir, tbls)
        root = Path(results_dir) if results_dir is not None else Path(m.run_dir).parent
        by_results_dir.setdefault(root.resolve(), []).append(tbls)
        problems = results.get(("prb", m.run_id), [])
        for path, line, text in problems:
            LOG.warning("%s%s: %s (skipped)", path, f":{line}" if line else "", text)
        outcome.runs.append(RunOutcome(m.run_id, m.run_dir, summary, problems))
    for root, per_run in by_results_dir.items():
        catalog.update_catalog(root, per_run)
    return outcome


def summarize_logs(
    spark: SparkSession, files: Sequence[Path | str]
) -> tuple[list[dict[str, Any]], list[tuple[str, int | None, str]]]:
    """Per file and tag of any HdrHistogram interval logs: count, percentiles, max, span."""
    tasks = [partials.Task("logfile", "", str(f)) for f in files]
    results = _run_rdd(spark, tasks)
    rows = []
    for key, figs in results.items():
        if key[0] != "log":
            continue
        span = (figs["end_ms"] - figs["start_ms"]) / 1000
        rows.append(
            {
                "file": key[1],
                "tag": key[2],
                **{f: figs[f] for f in LOG_FIGURES},
                "start_ms": figs["start_ms"],
                "end_ms": figs["end_ms"],
                "span_s": span,
                "intervals": figs["intervals"],
            }
        )
    order = {str(f): i for i, f in enumerate(files)}
    rows.sort(key=lambda r: (order.get(r["file"], 0), r["tag"] or ""))
    problems = results.get(("prb", ""), [])
    for path, line, text in problems:
        LOG.warning("%s%s: %s (skipped)", path, f":{line}" if line else "", text)
    return rows, problems


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="summarize.py", description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", help="run directories")
    p.add_argument("--all", metavar="RESULTS_DIR", help="every run under RESULTS_DIR")
    p.add_argument("--logs", nargs="+", metavar="FILE", help="summarize interval logs only")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--window-s", type=float, default=DEFAULT_WINDOW_S)
    p.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's, else local[*])"
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``spark-submit spark/summarize.py ...`` (prints JSON lines)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    args = _parse_args(argv)
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"  # plain `python spark/summarize.py`, not under spark-submit
    spark = build_session(master)
    try:
        if args.logs:
            rows, problems = summarize_logs(spark, args.logs)
            print(
                json.dumps(
                    {"format_version": 1, "logs": rows, "problems": [list(p) for p in problems]},
                    indent=1,
                )
            )
            return 0
        dirs = list(args.runs)
        if args.all:
            dirs += [str(p) for p in plan.find_runs(args.all)]
        if not dirs:
            print(
                "nothing to summarize: give run directories, --all DIR or --logs FILE...",
                file=sys.stderr,
            )
            return 2
        out = summarize_runs(spark, dirs, args.window_s, results_dir=args.all)
        for r in out.runs:
            print(json.dumps({**r.summary, "run_dir": r.run_dir}, sort_keys=True))
        for s in out.skipped:
            print(f"skipped {s}", file=sys.stderr)
        return 0
    except ArchiveError as err:
        print(err, file=sys.stderr)
        return 2
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
