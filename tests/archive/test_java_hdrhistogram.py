"""The workers' interval logs are standard: Java HdrHistogram's HistogramLogProcessor reads them
(Debian libhdrhistogram-java, installed by the test bootstrap)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mqlab.archive.codecs import new_histogram
from mqlab.archive.hlog import IntervalLogWriter
from mqlab.workload.histograms import BulkHistogram

pytestmark = pytest.mark.integration
JAR = Path("/usr/share/java/hdrhistogram.jar")


def test_java_histogram_log_processor_reads_our_logs(tmp_path: Path) -> None:
    assert JAR.is_file(), (
        f"{JAR} missing: run scripts/bootstrap --test (Debian libhdrhistogram-java)"
    )
    rng = np.random.default_rng(5)
    path = tmp_path / "processing_us.hlog"
    start_ms = 1_790_000_000_000
    merged = new_histogram()
    b = BulkHistogram()
    with path.open("w") as f:
        w = IntervalLogWriter(f, start_ms, "mqlab metric=processing_us unit=us")
        for i in range(5):
            b.record(rng.lognormal(7, 1.2, 2000).astype(np.int64) + 1)
            w.write(b.hist, start_ms + i * 1000, start_ms + (i + 1) * 1000)
            merged.add(b.hist)
            b.reset()
    out = subprocess.run(
        [
            "java",
            "-cp",
            str(JAR),
            "org.HdrHistogram.HistogramLogProcessor",
            "-i",
            str(path),
            "-outputValueUnitRatio",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    total = int(re.search(r"Total count\s*=\s*(\d+)", out).group(1))  # type: ignore[union-attr]
    max_value = float(re.search(r"Max\s*=\s*([\d.]+)", out).group(1))  # type: ignore[union-attr]
    assert total == merged.get_total_count() == 10_000
    assert max_value == merged.get_max_value()
