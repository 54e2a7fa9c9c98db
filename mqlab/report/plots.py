"""PNG plots of summarized runs (matplotlib, Agg backend): the latency percentile
distribution, the per-second timeline, and sweep plots against threads and nodes.

Plots draw the summary's tables as they are (one computation per figure): they convert
units and shift times, never recompute a figure from raw files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import struct
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from hdrh.histogram import HdrHistogram  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from mqlab.analysis import faults as fault_figures  # noqa: E402
from mqlab.archive.layout import METRICS  # noqa: E402

LOG = logging.getLogger(__name__)

TIMELINE_PNG = "timeline.png"
PERCENTILES_PNG = "latency_percentiles.png"
MAX_NINES = 6  # the percentile axis ends at 99.9999
TICKS = (0.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999)
PNG_METADATA = {"Software": "mqlab", "format_version": "2"}
INPUTS_KEY = "mqlab-inputs"  # a run plot's tEXt chunk: the digest of what it was drawn from
RUN_FIELDS_DRAWN = ("run_id", "measure_start_ms", "warmup_end_ms", "send_end_ms")
DRAWING_VERSION = "1"  # part of that digest: change it when a run plot is drawn otherwise
WARMUP_STYLE = {"color": "grey", "alpha": 0.15, "linewidth": 0}
FAULT_STYLE = {"color": "C3", "alpha": 0.12, "linewidth": 0, "hatch": "//"}
# percentile curves: a metric and its variant share a hue family, variants dashed, so
# curves that coincide (send_call_us and send_msg_us in a closed loop) stay visible
CURVE_STYLE: dict[str, dict[str, Any]] = {
    "send_call_us": {"color": "C0"},
    "send_msg_us": {"color": "C9", "linestyle": "--"},
    "send_failed_us": {"color": "C2", "linestyle": "-."},
    "processing_us": {"color": "C3"},
    "processing_first_us": {"color": "C1", "linestyle": "--"},
}
# timeline series: (table column, label), drawn per second
RATE_SERIES = (
    ("confirmed", "sent (confirmed) msgs/s"),
    ("received", "received msgs/s"),
    ("failed", "failed msgs/s"),
    ("unsent", "unsent msgs/s"),
)
LATENCY_SERIES = (  # (metric, figure, label): only seconds with values are drawn
    ("processing_us", "p50", "processing p50"),
    ("processing_us", "p99", "processing p99"),
    ("send_msg_us", "p99", "send msg p99"),
)


def percentile_curve(encoded: str, points: int = 300) -> tuple[list[float], list[float]]:
    """(x, value in ms) along a log-scale percentile axis, x = 1 / (1 - p/100)."""
    hist = HdrHistogram.decode(encoded.encode("ascii"))
    pcts = [100.0 * (1 - 10 ** (-MAX_NINES * i / (points - 1))) for i in range(points)]
    values = hist.get_percentile_to_value_dict(pcts)
    xs = [1 / (1 - p / 100) for p in pcts]
    return xs, [values.get(p, 0) / 1000 for p in pcts]


def _save(fig: Any, path: Path, inputs: str | None = None) -> None:
    metadata = PNG_METADATA if inputs is None else {**PNG_METADATA, INPUTS_KEY: inputs}
    fig.savefig(path, dpi=100, metadata=metadata)
    plt.close(fig)


def inputs_digest(
    run: dict[str, Any],
    hists: dict[str, str],
    timeline: Sequence[dict[str, Any]],
    faults: Sequence[dict[str, Any]],
) -> str:
    """What a run's plots are drawn from, as a sha256: the run row's fields they read,
    its overall histograms, its timeline rows and faults, the drawing's version and
    matplotlib's."""
    inputs = {
        "drawing": DRAWING_VERSION,
        "matplotlib": matplotlib.__version__,
        "run": {k: run.get(k) for k in RUN_FIELDS_DRAWN},
        "hists": hists,
        "timeline": sorted(timeline, key=lambda r: r["second_ms"]),
        "faults": list(faults),
    }
    text = json.dumps(inputs, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def png_text(path: Path) -> dict[str, str]:
    """A PNG's tEXt chunks before its image data ({} for a file that is not a PNG)."""
    out: dict[str, str] = {}
    try:
        with path.open("rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                return {}
            while True:
                head = f.read(8)
                if len(head) < 8:
                    return out
                length, kind = struct.unpack(">I4s", head)
                if kind in (b"IDAT", b"IEND"):
                    return out
                data = f.read(length)
                f.read(4)  # its CRC
                if kind == b"tEXt" and b"\0" in data:
                    key, _, value = data.partition(b"\0")
                    out[key.decode("latin-1")] = value.decode("latin-1")
    except OSError:
        return {}


def _reused(name: str, digest: str, reuse_from: Path | None, out_dir: Path) -> bool:
    """``name`` copied from ``reuse_from`` when it was drawn there from the same inputs."""
    if reuse_from is None:
        return False
    found = reuse_from / name
    if png_text(found).get(INPUTS_KEY) != digest:
        return False
    if found.resolve() != (out_dir / name).resolve():
        shutil.copyfile(found, out_dir / name)
    return True


def plot_latency_distribution(
    histograms: dict[str, str], path: Path, title: str, inputs: str | None = None
) -> None:
    """One curve per metric (in the order given), latency in ms on a log axis."""
    fig, ax = plt.subplots(figsize=(9, 5))
    for metric, encoded in histograms.items():
        xs, ys = percentile_curve(encoded)
        ys = [y if y > 0 else math.nan for y in ys]  # a log axis has no 0
        ax.plot(xs, ys, label=metric, **CURVE_STYLE.get(metric, {}))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks([1 / (1 - p / 100) for p in TICKS])
    ax.set_xticklabels([f"{p:g}%" for p in TICKS])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    _save(fig, path, inputs)


def fault_windows(faults: Sequence[dict[str, Any]]) -> list[tuple[int, int | None, str]]:
    """(start ms, end ms or None while it lasted to the end, label) of each fault of a
    run's manifest, as ``mqlab.analysis.faults.windows`` pairs them."""
    return [(w["start_ms"], w["end_ms"], w["label"]) for w in fault_figures.windows(faults)]


def plot_timeline(
    rows: Sequence[dict[str, Any]],
    path: Path,
    start_ms: int,
    warmup_end_ms: int,
    title: str,
    send_end_ms: int | None = None,
    faults: Sequence[dict[str, Any]] = (),
    inputs: str | None = None,
) -> None:
    """The ``timeline`` table of one run, three panels sharing the time axis (seconds since
    ``start_ms``, the senders' start): send vs receive msgs/s; processing latency p50/p99
    and send msg p99 (ms, log); backlog (confirmed, not yet received) and sender lag."""
    rows = sorted(rows, key=lambda r: r["second_ms"])
    # each row is the second [x, x + 1): steps drawn to the end of the last one
    xs = [(r["second_ms"] - start_ms) / 1000 for r in rows]
    xs.append(xs[-1] + 1 if xs else 0.0)

    def steps(ys: list[Any]) -> list[Any]:
        return [*ys, ys[-1]] if ys else [0]

    fig, (rate_ax, lat_ax, back_ax) = plt.subplots(
        3, 1, figsize=(10, 9), sharex=True, gridspec_kw={"height_ratios": (1, 1, 1)}
    )
    for col, label in RATE_SERIES:
        ys = [r[col] for r in rows]
        if col in ("confirmed", "received") or any(ys):
            rate_ax.plot(xs, steps(ys), drawstyle="steps-post", label=label)
    rate_ax.set_ylim(bottom=0)
    rate_ax.set_ylabel("messages per second")
    rate_ax.set_title(title)

    drawn = False
    for metric, fig_name, label in LATENCY_SERIES:
        ys = [r[f"{metric}_{fig_name}"] / 1000 if r[f"{metric}_count"] else math.nan for r in rows]
        if any(y > 0 for y in ys if not math.isnan(y)):
            lat_ax.plot(xs, steps(ys), drawstyle="steps-post", label=label)
            drawn = True
    if drawn:
        lat_ax.set_yscale("log")
    else:
        lat_ax.text(0.5, 0.5, "no latency values", ha="center", transform=lat_ax.transAxes)
    lat_ax.set_ylabel("latency (ms)")

    back_ax.plot(
        xs,
        steps([r["backlog"] for r in rows]),
        drawstyle="steps-post",
        color="C0",
        label="backlog",
    )
    back_ax.set_ylim(bottom=0)
    back_ax.set_ylabel("backlog (messages)")
    lag_ax = back_ax.twinx()
    lag_ax.plot(
        xs,
        steps([r["sender_lag_ms"] for r in rows]),
        drawstyle="steps-post",
        color="C3",
        linestyle="--",
        label="sender lag",
    )
    lag_ax.set_ylim(bottom=0, top=max([1, *(r["sender_lag_ms"] for r in rows)]) * 1.1)
    lag_ax.set_ylabel("sender lag (ms)")
    back_ax.set_xlabel("seconds since the senders started")

    warm = (warmup_end_ms - start_ms) / 1000
    for i, ax in enumerate((rate_ax, lat_ax, back_ax)):
        if warm > 0:
            ax.axvspan(0, warm, **WARMUP_STYLE, label="warm-up" if i == 0 else None)
        if send_end_ms is not None:
            ax.axvline(
                (send_end_ms - start_ms) / 1000,
                color="black",
                linestyle=":",
                linewidth=1,
                label="last confirmed send" if i == 0 else None,
            )
        ax.grid(True, alpha=0.3)
    end_s = xs[-1] if xs else 0.0
    for k, (a, b, label) in enumerate(fault_windows(faults)):
        x0 = (a - start_ms) / 1000
        x1 = end_s if b is None else max((b - start_ms) / 1000, x0 + 0.1)
        for i, ax in enumerate((rate_ax, lat_ax, back_ax)):
            ax.axvspan(x0, x1, **FAULT_STYLE, label="fault" if i == 0 and k == 0 else None)
        rate_ax.annotate(
            label,
            (x0, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, -2),
            textcoords="offset points",
            va="top",
            fontsize="x-small",
            color="C3",
        )
    rate_ax.legend(loc="best", fontsize="small", framealpha=0.85)
    if drawn:
        lat_ax.legend(loc="best", fontsize="small", framealpha=0.85)
    handles = back_ax.get_legend_handles_labels()
    lag = lag_ax.get_legend_handles_labels()
    lag_ax.legend(  # on the twin axis, so it is drawn above both curves
        handles[0] + lag[0], handles[1] + lag[1], loc="best", fontsize="small", framealpha=0.85
    )
    fig.tight_layout()
    _save(fig, path, inputs)


def plot_sweep(
    runs: list[dict[str, Any]], path: Path, field: str, ylabel: str, title: str, scale: float = 1.0
) -> None:
    """``field`` against sender threads, one line per (sender nodes, receiver nodes,
    sender processes per node)."""
    lines: dict[tuple[int, int, int], list[tuple[int, float]]] = defaultdict(list)
    for r in runs:
        if r.get(field) is not None:
            procs = r.get("sender_processes")
            key = (r["sender_nodes"], r["receiver_nodes"], 1 if procs is None else int(procs))
            lines[key].append((r["sender_threads"], r[field] * scale))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (s, rn, sp), pts in sorted(lines.items()):
        pts.sort()
        label = f"{s}s-{rn}r nodes" + (f", {sp} processes each" if sp != 1 else "")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xlabel("sender threads per process")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if lines:
        ax.legend()
    fig.tight_layout()
    _save(fig, path)


def overall_histograms(latency: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The measured period's histogram of each metric that has values (rows of the
    ``latency`` table whose ``window_index`` is null), in the order of ``METRICS``."""
    hists = {
        r["metric"]: r["histogram"]
        for r in latency
        if r["window_index"] is None and r["histogram"] and r["count"]
    }
    return {m: hists[m] for m in METRICS if m in hists}


def plot_run(
    run: dict[str, Any],
    latency: Sequence[dict[str, Any]],
    timeline: Sequence[dict[str, Any]],
    out_dir: Path,
    faults: Sequence[dict[str, Any]] = (),
    reuse_from: Path | None = None,
) -> list[str]:
    """The plots of one run (a ``runs`` row with its ``latency`` and ``timeline`` rows),
    as the run's report shows them: ``timeline.png`` when the timeline has rows and
    ``latency_percentiles.png`` when a metric has values, written into ``out_dir``.
    Each PNG carries the digest of its inputs (``inputs_digest``); one in ``reuse_from``
    (the run's own folder, whose report drew them) with the same digest is copied rather
    than drawn again. Returns the names of the files written."""
    images = []
    hists = overall_histograms(latency)
    digest = inputs_digest(run, hists, timeline, faults)
    if timeline:
        if not _reused(TIMELINE_PNG, digest, reuse_from, out_dir):
            plot_timeline(
                timeline,
                out_dir / TIMELINE_PNG,
                run["measure_start_ms"],
                run["warmup_end_ms"],
                f"Per second: {run['run_id']}",
                send_end_ms=run["send_end_ms"],
                faults=faults,
                inputs=digest,
            )
        images.append(TIMELINE_PNG)
    if hists:
        if not _reused(PERCENTILES_PNG, digest, reuse_from, out_dir):
            plot_latency_distribution(
                hists,
                out_dir / PERCENTILES_PNG,
                f"Latency by percentile: {run['run_id']}",
                inputs=digest,
            )
        images.append(PERCENTILES_PNG)
    return images
