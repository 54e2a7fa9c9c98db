"""A run's whole latency distribution as text, laid out as HdrHistogram's own percentile
distribution listing (Java's ``outputPercentileDistribution``): the value at each
percentile step, the count of values up to it and 1/(1-percentile), halving the distance
to 100 % five ticks at a time, then the mean, standard deviation, max and total count.

It lists the summary's merged histogram of the measured period (the ``latency`` table's
rows with no window), in milliseconds; nothing is recomputed from the raw logs here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from mqlab.report.plots import overall_histograms

DISTRIBUTION_TXT = "latency_distribution.txt"
FORMAT_VERSION = 1
TICKS_PER_HALF_DISTANCE = 5
US_PER_MS = 1000.0
HEADER = f"{'Value':>12} {'Percentile':>14} {'TotalCount':>10} {'1/(1-Percentile)':>16}"


def listing(hist: HdrHistogram, ticks: int = TICKS_PER_HALF_DISTANCE) -> list[str]:
    """One metric's listing: a line per percentile step (value in ms, percentile as a
    fraction, the count of values at or below the value, 1/(1-percentile)), then a footer."""
    lines = [HEADER, ""]
    for it in hist.get_percentile_iterator(ticks):
        fraction = it.percentile_level_iterated_to / 100.0
        value = it.value_iterated_to / US_PER_MS
        count = it.total_count_to_this_value
        if fraction < 1.0:
            lines.append(f"{value:12.3f} {fraction:14.12f} {count:10d} {1 / (1 - fraction):16.2f}")
        else:
            lines.append(f"{value:12.3f} {fraction:14.12f} {count:10d}")
    lines += [
        f"#[Mean    = {hist.get_mean_value() / US_PER_MS:12.3f}, "
        f"StdDeviation   = {hist.get_stddev() / US_PER_MS:12.3f}]",
        f"#[Max     = {hist.get_max_value() / US_PER_MS:12.3f}, "
        f"TotalCount     = {hist.get_total_count():12d}]",
    ]
    return lines


def distribution_text(run: dict[str, Any], latency: Sequence[dict[str, Any]]) -> str | None:
    """Every metric's listing for a run (``runs`` row, ``latency`` table rows), or None when
    no metric has values."""
    hists = overall_histograms(latency)
    if not hists:
        return None
    out = [
        f"# mqlab latency distribution, format_version {FORMAT_VERSION}",
        f"# run {run['run_id']}: each metric's merged histogram over its measured period "
        "(warm-up excluded), values in ms, listed as HdrHistogram's percentile distribution "
        f"({TICKS_PER_HALF_DISTANCE} ticks per half distance)",
    ]
    for metric, encoded in hists.items():
        hist = HdrHistogram.decode(encoded.encode("ascii"))
        out += ["", f"## {metric}", ""] + listing(hist)
    return "\n".join(out) + "\n"


def write_distribution(
    run: dict[str, Any], latency: Sequence[dict[str, Any]], run_dir: Path
) -> Path | None:
    """Write ``latency_distribution.txt`` into the run (None: no latency recorded)."""
    text = distribution_text(run, latency)
    if text is None:
        return None
    path = run_dir / DISTRIBUTION_TXT
    path.write_text(text)
    return path
