"""PNG plots of a run (matplotlib, Agg backend): latency percentile distribution,
send vs receive throughput over time, and sweep plots against threads and nodes."""

from __future__ import annotations

import csv
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from hdrh.histogram import HdrHistogram  # noqa: E402

LOG = logging.getLogger(__name__)

MAX_NINES = 6  # the percentile axis ends at 99.9999
TICKS = (0.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999)
PNG_METADATA = {"Software": "mqlab", "format_version": "1"}


def percentile_curve(encoded: str, points: int = 300) -> tuple[list[float], list[float]]:
    """(x, value in ms) along a log-scale percentile axis, x = 1 / (1 - p/100)."""
    hist = HdrHistogram.decode(encoded.encode("ascii"))
    pcts = [100.0 * (1 - 10 ** (-MAX_NINES * i / (points - 1))) for i in range(points)]
    values = hist.get_percentile_to_value_dict(pcts)
    xs = [1 / (1 - p / 100) for p in pcts]
    return xs, [values.get(p, 0) / 1000 for p in pcts]


def plot_latency_distribution(histograms: dict[str, str], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for metric, encoded in sorted(histograms.items()):
        xs, ys = percentile_curve(encoded)
        ax.plot(xs, ys, label=metric)
    ax.set_xscale("log")
    ax.set_xticks([1 / (1 - p / 100) for p in TICKS])
    ax.set_xticklabels([f"{p:g}%" for p in TICKS])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata=PNG_METADATA)
    plt.close(fig)


def throughput_series(run_dir: Path) -> dict[str, dict[int, float]]:
    """Per role, msgs/s per interval start (epoch ms) summed over workers, from counts.csv."""
    series: dict[str, dict[int, float]] = {
        "send": defaultdict(float),
        "receive": defaultdict(float),
    }
    for counts in sorted((run_dir / "workers").glob("*/counts.csv")):
        try:
            with counts.open(newline="") as f:
                for row in csv.DictReader(f):
                    start, length = int(row["start_ms"]), int(row["length_ms"])
                    if length <= 0:
                        continue
                    second = start - start % 1000
                    series["send"][second] += int(row["confirmed"]) * 1000 / length
                    series["receive"][second] += int(row["received"]) * 1000 / length
        except (OSError, KeyError, ValueError) as err:
            LOG.warning("%s: skipped in the throughput plot: %s", counts, err)
    return series


def plot_throughput(run_dir: Path, path: Path, warmup_end_ms: int, title: str) -> None:
    series = throughput_series(run_dir)
    starts = [t for s in series.values() for t in s]
    t0 = min(starts) if starts else warmup_end_ms
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for role, data in series.items():
        if data:
            xs = sorted(data)
            ax.plot([(x - t0) / 1000 for x in xs], [data[x] for x in xs], label=f"{role} msgs/s")
    ax.axvspan(0, max(0.0, (warmup_end_ms - t0) / 1000), color="grey", alpha=0.15, label="warm-up")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("messages per second")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata=PNG_METADATA)
    plt.close(fig)


def plot_sweep(
    runs: list[dict[str, Any]], path: Path, field: str, ylabel: str, title: str, scale: float = 1.0
) -> None:
    """``field`` against sender threads, one line per (sender nodes, receiver nodes)."""
    lines: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for r in runs:
        if r.get(field) is not None:
            lines[(r["sender_nodes"], r["receiver_nodes"])].append(
                (r["sender_threads"], r[field] * scale)
            )
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (s, rn), pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{s}s-{rn}r nodes")
    ax.set_xlabel("sender threads per node")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata=PNG_METADATA)
    plt.close(fig)
