"""The quickstart's real run (local 3-node NATS cluster), summarized by Spark, gives the
same figures as the summary ``mqlab run`` wrote in process; report, query and compare
then work on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from mqlab.cli.data import compare, query, report
from spark.summarize import summarize_runs
from tests.conftest import SharedLab

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_run_spark_equals_the_run_summary(
    spark: SparkSession, shared_lab: SharedLab, tmp_path: Path
) -> None:
    shared_lab.cluster("nats")  # the session's local NATS cluster (started on first use)
    results = tmp_path / "results"
    env = {**os.environ, "MQLAB_STATE_DIR": str(shared_lab.root)}
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "mqlab"),
            "run",
            str(ROOT / "scenarios" / "quickstart.toml"),
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    (run_dir,) = [p for p in results.iterdir() if (p / "manifest.json").is_file()]
    written = json.loads((run_dir / "summary.json").read_text())
    assert written["format_version"] == 2

    out = summarize_runs(spark, [run_dir])
    (run,) = out.runs
    assert run.problems == []
    assert run.summary == written
    assert run.summary["latency_us"]["processing_us"]["count"] > 0

    res = CliRunner().invoke(report, ["--results", str(results), str(run_dir)])
    assert res.exit_code == 0, res.output
    # threads, processes per node, sender and receiver nodes: mqperf's 5-thread row
    assert "| 5 | 1 | 1 | 2 |" in (run_dir / "report.md").read_text()
    res = CliRunner().invoke(
        query,
        [
            "--results",
            str(results),
            "--json",
            "SELECT send_msgs_per_s, processing_us_p95 FROM runs",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [
        {
            "send_msgs_per_s": written["throughput"]["send_msgs_per_s"],
            "processing_us_p95": written["latency_us"]["processing_us"]["p95"],
        }
    ]
    res = CliRunner().invoke(
        compare, ["--results", str(results), "--reference", "mqperf-2021", str(run_dir)]
    )
    assert res.exit_code == 0 and "NATS Streaming" in res.output and "approximate" in res.output
