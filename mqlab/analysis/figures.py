"""One definition of the summary's latency figures (every table and report uses it)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hdrh.histogram import HdrHistogram

from mqlab.archive.codecs import new_histogram

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
FIGURES = ("count", "mean", *PERCENTILES, "max")


def figures(hist: HdrHistogram | None, names: Sequence[str] = FIGURES) -> dict[str, float | int]:
    """count, mean, the percentiles of PERCENTILES and max of a merged histogram (us), or
    only the figures ``names`` asks for. The percentile p is hdrh's
    ``get_value_at_percentile(p)``, the mean hdrh's ``get_mean_value()`` rounded to 3
    decimals, both computed as hdrh does but over the counts array at once (hdrh walks it
    value by value in Python: ~30 ms a histogram). An empty (or no) histogram gives 0 for
    every figure."""
    hist = hist if hist is not None else new_histogram()
    total = hist.get_total_count()
    if not total:
        return {k: (0.0 if k == "mean" else 0) for k in names}
    counts = np.ctypeslib.as_array(hist.counts)[: hist.counts_len]
    running = np.cumsum(counts) if any(k in PERCENTILES for k in names) else counts
    out: dict[str, float | int] = {}
    for key in names:
        if key == "count":
            out[key] = int(total)
        elif key == "mean":
            out[key] = round(_mean(hist, counts), 3)
        elif key == "max":
            out[key] = int(hist.get_max_value())
        else:
            out[key] = _value_at_percentile(hist, running, PERCENTILES[key])
    return out


def _value_at_percentile(hist: HdrHistogram, running: np.ndarray, percentile: float) -> int:
    """``hist.get_value_at_percentile(percentile)``: the first index where the running
    count reaches the target count, as its highest equivalent value."""
    target = hist.get_target_count_at_percentile(percentile)
    index = int(np.searchsorted(running, target, side="left"))
    if index >= running.size:
        return 0
    value = hist.get_value_from_index(index)
    if percentile:
        return int(hist.get_highest_equivalent_value(value))
    return int(hist.get_lowest_equivalent_value(value))


def _mean(hist: HdrHistogram, counts: np.ndarray) -> float:
    """``hist.get_mean_value()``: every recorded count at the median equivalent value of
    its bucket, summed exactly (Python integers), over the total count."""
    acc = 0
    for index in np.flatnonzero(counts).tolist():
        value = hist.get_value_from_index(index)
        low = hist.get_lowest_equivalent_value(value)
        size = hist.get_highest_equivalent_value(value) - low + 1
        acc += int(counts[index]) * (low + (size >> 1))
    return float(acc) / hist.get_total_count()
