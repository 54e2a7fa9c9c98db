"""spark/summarize.py unchanged on a real Spark standalone cluster (master + worker on
127.0.0.1, started from the pyspark distribution), submitted with ``--master spark://``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest

from mqlab.analysis.catalog import catalog_file
from mqlab.analysis.job import summarize_run
from tests.fixtures.synthetic import SyntheticSpec, write_synthetic_run

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {path}:\n{path.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    port, ui = _free_port(), _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    try:
        mlog = tmp_path / "master.log"
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
                env=_env(),
                stdout=mlog.open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        _wait_for(mlog, "New state: ALIVE", procs[0], 90)
        url = f"spark://127.0.0.1:{port}"
        wlog = tmp_path / "worker.log"
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    str(_free_port()),
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--work-dir",
                    str(tmp_path / "work"),
                    url,
                ],
                env=_env(),
                stdout=wlog.open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        _wait_for(wlog, "Successfully registered with master", procs[1], 90)
        yield url
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


def test_job_runs_unchanged_with_spark_submit_master(standalone: str, tmp_path: Path) -> None:
    results = tmp_path / "results"
    runs = [
        write_synthetic_run(
            results, SyntheticSpec(duration_s=5, seed=i, start_s=1763806925.25 + 100 * i)
        )
        for i in range(2)
    ]
    proc = subprocess.run(
        [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master",
            standalone,
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--executor-memory",
            "512m",
            str(ROOT / "spark" / "summarize.py"),
            "--all",
            str(results),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert sorted(x["run_id"] for x in lines) == sorted(r.run_id for r in runs)
    for x, r in zip(sorted(lines, key=lambda x: x["run_id"]), runs, strict=True):
        assert x.pop("run_dir") == str(r.run_dir)
        assert x == summarize_run(r.run_dir)  # every figure, as the in-process summary
    assert pq.read_table(catalog_file(results, "runs")).num_rows == 2
