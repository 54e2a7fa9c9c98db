"""The PySpark job on synthetic archives that follow docs/archive-format.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hdrh.histogram import HdrHistogram
from pyspark.sql import SparkSession

from mqlab.cli_data import query, summarize
from mqlab.results import hlog, partials, runmeta
from mqlab.results.catalog import catalog_file, run_file
from mqlab.results.quick_summary import summarize_run
from mqlab.results.synthetic import SyntheticSpec, write_synthetic_run
from mqlab.results.tables import as_summary
from spark.summarize import summarize_logs, summarize_runs

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


def _direct(run_dir: Path, metric: str, from_ms: int) -> HdrHistogram:
    h = HdrHistogram(1, 3_600_000_000, 3)
    for f in sorted((run_dir / "workers").glob(f"*/{metric}.hlog")):
        lines, _ = hlog.read_lines(str(f))
        assert lines is not None
        for it in hlog.parse_log(str(f), lines):
            if isinstance(it, hlog.Interval) and it.start_ms >= from_ms:
                try:
                    h.decode_and_add(it.payload.encode())
                except Exception:  # the corrupt lines the job must skip
                    continue
    return h


def test_spark_percentiles_equal_hdrh_and_bad_lines_are_counted(
    spark: SparkSession, tmp_path: Path
) -> None:
    spec = SyntheticSpec(
        sender_nodes=2,
        receiver_nodes=2,
        duration_s=20,
        seed=3,
        lost_per_sender=1,
        duplicated_per_sender=2,
        reordered_per_receiver=1,
    )
    r = write_synthetic_run(tmp_path, spec)
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

    run = pq.read_table(run_file(r.run_dir, "runs")).to_pylist()[0]
    assert (run["bad_lines"], run["missing_files"]) == (2, 1)
    for metric in ("send_call_us", "send_msg_us", "processing_us"):
        h = _direct(r.run_dir, metric, r.warmup_end_ms)
        assert run[f"{metric}_count"] == h.get_total_count() > 0
        for name, p in hlog.PERCENTILES:
            assert run[f"{metric}_{name}"] == h.get_value_at_percentile(p), (metric, name)
        assert run[f"{metric}_max"] == h.get_max_value()

    # the same figures as the job's functions run in one process
    meta = runmeta.read_run(r.run_dir)
    local = partials.run_locally(runmeta.tasks_for(meta, 5000))
    lat = pq.read_table(run_file(r.run_dir, "latency")).to_pylist()
    for row in lat:
        w = partials.WHOLE if row["window_index"] is None else row["window_index"]
        assert row["p99_9"] == local[("lat", meta.run_id, row["metric"], w)]["p99_9"]
    windows = pq.read_table(run_file(r.run_dir, "windows")).to_pylist()
    assert [w["window_index"] for w in windows] == [0, 1, 2, 3, 4]
    catalog_runs = pq.read_table(catalog_file(tmp_path, "runs")).to_pylist()
    assert [c["run_id"] for c in catalog_runs] == [r.run_id]


def test_spark_percentiles_match_raw_samples(spark: SparkSession, tmp_path: Path) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(seed=11, samples_per_interval=200))
    out = summarize_runs(spark, [r.run_dir])
    lat = out.runs[0].summary["latency_us"]
    for metric, samples in r.samples.items():
        raw = sorted(v for start, v in samples if start >= r.warmup_end_ms)
        assert lat[metric]["count"] == len(raw)
        for name, p in hlog.PERCENTILES:
            exact = raw[max(1, int(p * len(raw) / 100 + 0.5)) - 1]
            assert exact <= lat[metric][name] <= exact + exact / 1024, (metric, name)


def test_spark_summary_equals_quick_summary(spark: SparkSession, tmp_path: Path) -> None:
    r = write_synthetic_run(
        tmp_path,
        SyntheticSpec(
            seed=5,
            sender_nodes=2,
            receiver_nodes=3,
            lost_per_sender=3,
            duplicated_per_sender=1,
            reordered_per_receiver=2,
        ),
    )
    quick = summarize_run(r.run_dir)
    spark_summary = summarize_runs(spark, [r.run_dir]).runs[0].summary
    assert spark_summary == as_summary(pq.read_table(run_file(r.run_dir, "runs")).to_pylist()[0])
    for part in ("throughput", "latency_us", "delivery"):
        assert spark_summary[part] == quick[part], part


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
    assert [r["sender_threads"] for r in json.loads(res.stdout)] == [1, 5]


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
    assert doc["run_id"] == r.run_id and doc["problems"] == 0
    assert doc["throughput"] == summarize_run(r.run_dir)["throughput"]
    assert run_file(r.run_dir, "latency").is_file()
