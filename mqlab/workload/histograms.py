"""HdrHistogram helpers: bulk (vectorized) recording and standard interval logs.

The pure-Python ``record_value`` costs ~1.4 us a call, so values are recorded
in bulk: bucket indices are computed with numpy and added into the histogram's
counts array in place. Values are microseconds, 1 us .. 1 h, 3 significant digits.
"""

from __future__ import annotations

import datetime as dt
from typing import TextIO

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIGNIFICANT_DIGITS = 3
LOG_FORMAT_VERSION = "1.3"


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


class BulkHistogram:
    """An ``hdrh`` histogram that records numpy arrays of values in one step."""

    def __init__(self) -> None:
        self.hist = new_histogram()
        h = self.hist
        self._counts = np.frombuffer(h.counts, dtype=np.int64)
        self._unit_mag = h.unit_magnitude
        self._shcm = h.sub_bucket_half_count_magnitude
        self._half = h.sub_bucket_half_count
        self._mask = h.sub_bucket_mask
        self.clamped = 0  # values outside [0, HIGHEST_US] that were clamped

    def counts_index(self, values: np.ndarray) -> np.ndarray:
        v = values.astype(np.int64, copy=False)
        bitlen = np.frexp((v | self._mask).astype(np.float64))[1].astype(np.int64)
        bucket = bitlen - self._unit_mag - (self._shcm + 1)
        sub = v >> (bucket + self._unit_mag)
        return ((bucket + 1) << self._shcm) + sub - self._half

    def record(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Record ``values`` (us); ``weights`` gives each value's count (default 1)."""
        if values.size == 0:
            return
        v = np.asarray(values, dtype=np.int64)
        lo, hi = int(v.min()), int(v.max())
        if lo < 0 or hi > HIGHEST_US:
            self.clamped += int(np.count_nonzero((v < 0) | (v > HIGHEST_US)))
            v = np.clip(v, 0, HIGHEST_US)
            lo, hi = max(lo, 0), min(hi, HIGHEST_US)
        idx = self.counts_index(v)
        n = self._counts.size
        if weights is None:
            self._counts += np.bincount(idx, minlength=n)[:n]
            total = int(v.size)
        else:
            w = np.asarray(weights, dtype=np.int64)
            self._counts += np.bincount(idx, weights=w, minlength=n)[:n].astype(np.int64)
            total = int(w.sum())
        h = self.hist
        h.total_count += total
        h.min_value = min(h.min_value, lo)
        h.max_value = max(h.max_value, hi)

    def reset(self) -> None:
        self._counts[:] = 0
        h = self.hist
        h.total_count = 0
        h.min_value = HdrHistogram(LOWEST_US, 2, 1).min_value  # sys.maxsize, as hdrh does
        h.max_value = 0

    @property
    def total(self) -> int:
        return int(self.hist.total_count)


class IntervalLogWriter:
    """Writes a standard HdrHistogram interval log (format 1.3).

    Timestamps are seconds relative to BaseTime (= StartTime, epoch seconds);
    Interval_Max is in milliseconds (values are microseconds).
    """

    def __init__(self, out: TextIO, start_ms: int, comment: str | None = None):
        self.out = out
        self.base_ms = start_ms
        when = dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
        if comment:
            out.write(f"#[{comment}]\n")
        out.write(f"#[Histogram log format version {LOG_FORMAT_VERSION}]\n")
        out.write(f"#[StartTime: {start_ms / 1000:.3f} (seconds since epoch), {when[:-3]}Z]\n")
        out.write(f"#[BaseTime: {start_ms / 1000:.3f} (seconds since epoch)]\n")
        out.write(
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        )

    def write(self, hist: HdrHistogram, start_ms: int, end_ms: int) -> None:
        rel = (start_ms - self.base_ms) / 1000
        length = (end_ms - start_ms) / 1000
        max_ms = hist.get_max_value() / 1000 if hist.get_total_count() else 0.0
        payload = hist.encode().decode("ascii")
        self.out.write(f"{rel:.3f},{length:.3f},{max_ms:.3f},{payload}\n")
        self.out.flush()


def percentiles(hist: HdrHistogram) -> dict[str, float | int]:
    """The summary's latency figures of one (merged) histogram, in us."""
    total = hist.get_total_count()
    out: dict[str, float | int] = {"count": int(total)}
    if not total:
        for key in (
            "mean",
            "p50",
            "p75",
            "p90",
            "p95",
            "p99",
            "p99_9",
            "p99_99",
            "p99_9999",
            "max",
        ):
            out[key] = 0
        return out
    out["mean"] = round(float(hist.get_mean_value()), 3)
    for key, p in PERCENTILES.items():
        out[key] = int(hist.get_value_at_percentile(p))
    out["max"] = int(hist.get_max_value())
    return out


PERCENTILES = {
    "p50": 50.0,
    "p75": 75.0,
    "p90": 90.0,
    "p95": 95.0,
    "p99": 99.0,
    "p99_9": 99.9,
    "p99_99": 99.99,
    "p99_9999": 99.9999,
}
