"""Bulk recording equals hdrh's own record_value, and the interval logs are standard."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from mqlab.analysis.figures import figures as percentiles
from mqlab.archive.codecs import new_histogram
from mqlab.archive.hlog import IntervalLogWriter
from mqlab.workload.histograms import BulkHistogram


def test_bulk_record_equals_record_value_exactly() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            rng.integers(0, 10_000, 15_000),  # several of record's chunks
            rng.integers(0, 3_600_000_000, 500),
            np.array([0, 1, 2047, 2048, 2049, 3_600_000_000]),
            # each side of every power of two (the index comes from the bit length)
            np.array([(1 << k) + d for k in range(1, 32) for d in (-1, 0, 1)]),
        ]
    )
    weights = rng.integers(1, 11, values.size)
    bulk = BulkHistogram()
    bulk.record(values, weights)
    ref = new_histogram()
    for v, w in zip(values.tolist(), weights.tolist(), strict=True):
        ref.record_value(v, w)
    assert list(bulk.hist.counts) == list(ref.counts)
    assert bulk.hist.get_total_count() == ref.get_total_count()
    for p in (50, 90, 99, 99.9, 99.9999):
        assert bulk.hist.get_value_at_percentile(p) == ref.get_value_at_percentile(p)
    assert bulk.hist.get_max_value() == ref.get_max_value()


def test_out_of_range_values_are_clamped_and_counted_apart() -> None:
    b = BulkHistogram()
    b.record(np.array([-5, 10, 4_000_000_000]))
    assert b.total == 3 and b.below_zero == 1 and b.above_max == 1
    assert b.hist.get_min_value() == 0 and b.hist.get_max_value() >= 3_599_000_000
    b.record(np.array([-1, 5_000_000_000]), np.array([4, 7]))  # weighted: counted by weight
    assert b.below_zero == 5 and b.above_max == 8


def test_reset_empties_the_histogram() -> None:
    b = BulkHistogram()
    b.record(np.arange(1, 1000))
    b.reset()
    assert b.total == 0 and sum(b.hist.counts) == 0 and b.hist.get_max_value() == 0


def test_interval_log_is_read_by_the_hdrhistogram_package(tmp_path: Path) -> None:
    path = tmp_path / "x.hlog"
    start_ms = 1_700_000_000_000
    b = BulkHistogram()
    with path.open("w") as f:
        w = IntervalLogWriter(f, start_ms, "mqlab metric=test")
        for i in range(3):
            b.record(np.arange(1, 101) * (i + 1))
            w.write(b.hist, start_ms + i * 1000, start_ms + (i + 1) * 1000)
            b.reset()
    reader = HistogramLogReader(str(path), HdrHistogram(1, 3_600_000_000, 3))
    seen = []
    while (h := reader.get_next_interval_histogram()) is not None:
        seen.append((h.get_total_count(), h.get_max_value(), h.get_start_time_stamp()))
    assert [s[0] for s in seen] == [100, 100, 100]
    assert [s[1] for s in seen] == [100, 200, 300]
    assert [round(s[2]) for s in seen] == [start_ms, start_ms + 1000, start_ms + 2000]


def test_percentiles_of_empty_and_full_histograms() -> None:
    assert percentiles(new_histogram())["count"] == 0
    b = BulkHistogram()
    b.record(np.arange(1, 1001))
    p = percentiles(b.hist)
    assert p["count"] == 1000 and p["p50"] == 500 and p["max"] == 1000


def test_writer_header_names_format_and_times() -> None:
    buf = io.StringIO()
    IntervalLogWriter(buf, 1_700_000_000_123)
    text = buf.getvalue()
    assert "#[Histogram log format version 1.3]" in text
    assert "#[StartTime: 1700000000.123 (seconds since epoch)" in text
    assert "#[BaseTime: 1700000000.123" in text
