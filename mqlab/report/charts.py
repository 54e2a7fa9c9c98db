"""The charts of an experiment page: a broker's runs against the rows mqperf 2021
published, send and receive msgs/s and processing p95 against threads x nodes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqlab.published.reference import ReferenceRow
from mqlab.report import plots

plt = plots.plt

Shape = tuple[int, int, int]  # sender nodes, receiver nodes, sender threads per node

# (panel title, the runs row's field and its scale, the published row's field)
PANELS = (
    ("send msgs/s", "send_msgs_per_s", 1.0, "send_msgs_per_s"),
    ("receive msgs/s", "receive_msgs_per_s", 1.0, "receive_msgs_per_s"),
    ("processing p95 (ms)", "processing_us_p95", 1 / 1000, "processing_latency_p95_ms"),
)


def shape_label(shape: Shape) -> str:
    sn, rn, st = shape
    return f"{st}t {sn}s-{rn}r"


def _shapes(runs: Sequence[dict[str, Any]], rows: Sequence[ReferenceRow]) -> list[Shape]:
    found = {(r["sender_nodes"], r["receiver_nodes"], r["sender_threads"]) for r in runs}
    found |= {(x.sender_nodes, x.receiver_nodes, x.sender_threads) for x in rows}
    return sorted(found)


def points(
    runs: Sequence[dict[str, Any]], rows: Sequence[ReferenceRow], field: str, scale: float, ref: str
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(x index, value) of the runs and of the published rows for one panel; x is the
    position of the shape in :func:`_shapes` order; unknown figures are left out."""
    shapes = _shapes(runs, rows)
    mine = [
        (shapes.index((r["sender_nodes"], r["receiver_nodes"], r["sender_threads"])), v * scale)
        for r in runs
        if (v := r.get(field)) is not None
    ]
    theirs = [
        (shapes.index((x.sender_nodes, x.receiver_nodes, x.sender_threads)), float(getattr(x, ref)))
        for x in rows
    ]
    return sorted(mine), sorted(theirs)


def plot_against_published(
    broker: str, runs: Sequence[dict[str, Any]], rows: Sequence[ReferenceRow], path: Path
) -> None:
    """Three panels side by side (send, receive, p95) for ``broker``: its runs as dots
    joined by a line, the published rows as squares, against threads x nodes."""
    shapes = _shapes(runs, rows)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(14, 4.8))
    for ax, (title, field, scale, ref) in zip(axes, PANELS, strict=True):
        mine, theirs = points(runs, rows, field, scale, ref)
        if mine:
            ax.plot([p[0] for p in mine], [p[1] for p in mine], "o-", label="mqlab (local)")
        if theirs:
            ax.plot(
                [p[0] for p in theirs],
                [p[1] for p in theirs],
                "s",
                color="C1",
                label="mqperf 2021 (published)",
            )
        if any(p[1] > 0 for p in mine + theirs):
            ax.set_yscale("log")
        ax.set_xticks(
            range(len(shapes)),
            [shape_label(s) for s in shapes],
            rotation=60,
            ha="right",
            fontsize=7,
        )
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(f"{broker}: threads per node, sender-receiver nodes")
    fig.tight_layout()
    plots._save(fig, path)
