"""The PySpark job on synthetic version 2 archives: its figures equal an independent
computation from the raw files and, exactly, the in-process summary's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hdrh.histogram import HdrHistogram
from pyspark.sql import SparkSession

from mqlab.analysis import partials, plan
from mqlab.analysis.catalog import catalog_file, run_file
from mqlab.analysis.job import summarize_run
from mqlab.analysis.schema import TABLES
from mqlab.analysis.tables import as_summary
from mqlab.archive import layout
from mqlab.cli.data import query, summarize
from spark.summarize import summarize_logs, summarize_runs
from tests.fixtures import reference
from tests.fixtures.synthetic import SyntheticSpec, write_synthetic_run

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _tables(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every Parquet table of a run, without the time it was written."""
    out = {t: pq.read_table(run_file(run_dir, t)).to_pylist() for t in TABLES}
    for row in out["runs"]:
        row.pop("summarized_at")
    return out


def test_spark_percentiles_equal_hdrh_and_bad_lines_are_counted(
    spark: SparkSession, tmp_path: Path
) -> None:
    spec = SyntheticSpec(
        sender_nodes=2,
        receiver_nodes=2,
        duration_s=20,
        seed=3,
        lost_per_sender=1,
        redelivered_per_sender=2,
        reordered_per_receiver=1,
    )
    r = write_synthetic_run(tmp_path, spec)
    want = {
        m: reference.figures(reference.merged(r.run_dir, m, r.warmup_end_ms))
        for m in layout.METRICS
    }
    log = r.run_dir / "workers" / "receiver-01" / "processing_us.hlog"
    with log.open("a") as f:
        f.write("99.000,1.000,1.0,HISTFAAAAB\n")  # corrupt payload
        f.write("100.000,1.0")  # truncated last line
    n_lines = len(log.read_text().splitlines())
    (r.run_dir / "workers" / "sender-01" / "sent.json").unlink()

    out = summarize_runs(spark, [r.run_dir], window_s=5)
    assert len(out.runs) == 1
    problems = out.runs[0].problems
    assert [(Path(p[0]).name, p[1]) for p in problems] == [
        ("processing_us.hlog", n_lines - 1),
        ("processing_us.hlog", n_lines),
        ("sent.json", None),
    ]
    summary = out.runs[0].summary
    assert summary["problems"] == {"bad_lines": 2, "missing_files": 1}
    assert summary["delivery"]["lost"] is None and summary["status"] == "partial"
    assert "sent.json of sender-01" in summary["unknown"]["lost"]
    assert summary["latency_us"] == want

    # the same figures as the job's functions run in one process
    meta = plan.read_run(r.run_dir)
    local = partials.run_locally(plan.tasks_for(meta, 5000))
    lat = pq.read_table(run_file(r.run_dir, "latency")).to_pylist()
    for row in lat:
        w = partials.WHOLE if row["window_index"] is None else row["window_index"]
        assert row["p99_9"] == local[("lat", meta.run_id, row["metric"], w)]["p99_9"]
    windows = pq.read_table(run_file(r.run_dir, "windows")).to_pylist()
    expected = reference.window_rates(r.run_dir, "sender", r.warmup_end_ms, 5000)
    assert [w["window_index"] for w in windows] == sorted(expected)
    catalog_runs = pq.read_table(catalog_file(tmp_path, "runs")).to_pylist()
    assert [c["run_id"] for c in catalog_runs] == [r.run_id]


def test_spark_percentiles_match_raw_samples(spark: SparkSession, tmp_path: Path) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(seed=11, samples_per_interval=200))
    out = summarize_runs(spark, [r.run_dir])
    lat = out.runs[0].summary["latency_us"]
    for metric, samples in r.samples.items():
        raw = sorted(v for start, v in samples if start >= r.warmup_end_ms)
        assert lat[metric]["count"] == len(raw)
        for name, p in reference.PERCENTILES.items():
            exact = raw[max(1, int(p * len(raw) / 100 + 0.5)) - 1] if raw else 0
            assert exact <= lat[metric][name] <= exact + exact / 1024, (metric, name)


def test_spark_figures_equal_the_in_process_summary_exactly(
    spark: SparkSession, tmp_path: Path
) -> None:
    edge = write_synthetic_run(
        tmp_path,
        SyntheticSpec(
            seed=5,
            sender_nodes=2,
            receiver_nodes=3,
            stalls=((8.0, 3.0),),
            failed_per_sender=1,
            unsent_per_sender=2,
            lost_per_sender=3,
            undrained_per_sender=2,
            undrained_foreign=2,
            redelivered_per_sender=1,
            cross_delivered_per_sender=2,
            reordered_per_receiver=2,
            foreign_per_receiver=3,
            out_of_range=(("processing_first_us", 1, 1),),
            extra={"mode": "closed_loop"},  # the effective concurrency too
        ),
    )
    partial = write_synthetic_run(
        tmp_path,
        SyntheticSpec(
            seed=6,
            start_s=1763807925.25,
            undrained="unidentified",
            undrained_per_sender=2,
            omit=("workers/receiver-01/delivery.json", "workers/sender-00/worker.json"),
        ),
    )
    out = summarize_runs(spark, [edge.run_dir, partial.run_dir], window_s=7)
    by_id = {x.run_id: x for x in out.runs}
    for r in (edge, partial):
        spark_summary = by_id[r.run_id].summary
        spark_tables = _tables(r.run_dir)
        assert spark_summary == as_summary(
            pq.read_table(run_file(r.run_dir, "runs")).to_pylist()[0]
        )
        local = summarize_run(r.run_dir, window_s=7)
        assert spark_summary == local
        assert spark_tables == _tables(r.run_dir)
    assert by_id[edge.run_id].summary["unknown"] == {}
    assert by_id[edge.run_id].summary["saturation"]["effective_concurrency"] is not None
    assert by_id[edge.run_id].summary["delivery"] == edge.delivery
    assert set(by_id[partial.run_id].summary["unknown"]) >= {"lost", "received", "foreign"}


def test_spark_skips_a_format_version_1_archive_with_a_one_line_reason(
    spark: SparkSession, tmp_path: Path
) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(duration_s=3))
    manifest = r.run_dir / layout.MANIFEST
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format_version": 1}))
    out = summarize_runs(spark, [r.run_dir])
    assert out.runs == []
    (skipped,) = out.skipped
    assert "\n" not in skipped and "format_version 1" in skipped and "mqlab run" in skipped


def _foreign_log(path: Path) -> dict[str, list[int]]:
    values = {"read": [100, 200, 300, 4000], "write": [7, 8, 9]}
    lines = [
        "#[Histogram log format version 1.2]",
        "#[StartTime: 1600000000.000 (seconds since epoch), Sun Sep 13 12:26:40 UTC 2020]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]
    for i, (tag, vals) in enumerate(sorted(values.items())):
        for j, v in enumerate(vals):
            h = HdrHistogram(1, 3_600_000_000, 3)
            h.record_value(v)
            lines.append(f"Tag={tag},{i * 10 + j}.000,1.000,{v / 1000:.3f},{h.encode().decode()}")
    lines.append("Tag=read,99.000,1.000,0.1")  # bad line (3 fields after the tag)
    path.write_text("\n".join(lines) + "\n")
    return values


def test_summarize_logs_cli_json(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "pulsar-perf.hgrm"
    values = _foreign_log(path)
    res = CliRunner().invoke(summarize, ["--logs", "--json", str(path)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    by_tag = {row["tag"]: row for row in doc["logs"]}
    assert set(by_tag) == {"read", "write"}
    assert by_tag["read"]["count"] == 4 and by_tag["read"]["max"] == 4001  # highest equiv.
    assert by_tag["write"]["p50"] == 8 and by_tag["write"]["span_s"] == 3.0
    assert by_tag["read"]["start_ms"] == 1600000000000
    assert by_tag["write"]["start_ms"] == 1600000010000
    assert doc["problems"] == [
        [str(path), 11, "expected 4 comma-separated fields, found 3 (truncated or corrupt)"]
    ]
    rows, _ = summarize_logs(spark, [path])
    assert sum(r["count"] for r in rows) == sum(len(v) for v in values.values())


def test_cli_summarize_all_then_query(spark: SparkSession, tmp_path: Path) -> None:
    for seed, threads in ((1, 1), (2, 5)):
        write_synthetic_run(
            tmp_path,
            SyntheticSpec(
                seed=seed,
                sender_threads=threads,
                receiver_threads=threads,
                duration_s=5,
                start_s=1763806925.25 + seed * 100,
            ),
        )
    res = CliRunner().invoke(summarize, ["--all", "--results", str(tmp_path)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        query,
        [
            "--results",
            str(tmp_path),
            "--json",
            "SELECT sender_threads, send_msgs_per_s FROM runs ORDER BY sender_threads",
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["sender_threads"] for r in rows] == [1, 5]
    assert rows[1]["send_msgs_per_s"] == pytest.approx(5 * rows[0]["send_msgs_per_s"], rel=0.01)


def test_spark_submit_runs_the_job_file_unchanged(tmp_path: Path) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(duration_s=5))
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [
            str(submit),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            str(ROOT / "spark" / "summarize.py"),
            str(r.run_dir),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["run_id"] == r.run_id
    assert doc["problems"] == {"bad_lines": 0, "missing_files": 0}
    assert doc["throughput"] == summarize_run(r.run_dir)["throughput"]
    assert run_file(r.run_dir, "latency").is_file()
