"""``report.md`` and PNG plots for summarized runs, and a sweep report over several."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqlab.errors import ArchiveError
from mqlab.results import catalog, plots
from mqlab.results.tables import DELIVERY, FIGURES, METRICS

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 1
# the mqperf table; "send latency" is the latency of one send() call (a batch)
MQPERF_HEADER = (
    "Threads",
    "Sender nodes",
    "Receiver nodes",
    "Send msgs/s",
    "Receive msgs/s",
    "Processing latency p95",
    "Send latency p95",
)


def _ms(us: float | int | None) -> str:
    return "–" if us is None else f"{us / 1000:,.1f} ms"


def _num(x: float | int | None, digits: int = 0) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def threads_label(run: dict[str, Any]) -> str:
    st, rt = run["sender_threads"], run["receiver_threads"]
    return str(st) if st == rt else f"{st}/{rt}"


def mqperf_row(run: dict[str, Any]) -> list[str]:
    return [
        threads_label(run),
        str(run["sender_nodes"]),
        str(run["receiver_nodes"]),
        _num(run["send_msgs_per_s"]),
        _num(run["receive_msgs_per_s"]),
        _ms(run["processing_us_p95"]),
        _ms(run["send_call_us_p95"]),
    ]


def run_markdown(run: dict[str, Any], windows: list[dict[str, Any]], images: list[str]) -> str:
    lines = [
        f"# {run['run_id']}",
        "",
        f"<!-- mqlab report, format_version {FORMAT_VERSION} -->",
        "",
        f"- scenario `{run['scenario']}`, broker `{run['broker']}`, profile "
        f"`{run['profile']}`, status `{run['status']}` ({run['end_reason']})",
        f"- started {run['started_at']}, ended {run['ended_at']}; measured from warm-up "
        f"end, windows of {run['window_s']:g} s",
        f"- message size {run['message_bytes']} bytes, batch {run['batch']}",
        "",
    ]
    lines += ["## mqperf table", ""] + _table(MQPERF_HEADER, [mqperf_row(run)])
    worst = [w["processing_us_p95"] for w in windows if w["processing_us_p95"] is not None]
    if worst:
        lines += [
            "",
            f"Processing latency p95 per {run['window_s']:g} s window: worst "
            f"{_ms(max(worst))}, best {_ms(min(worst))} over {len(worst)} windows.",
        ]
    lines += ["", "## Delivery", ""]
    lines += _table(DELIVERY, [[_num(run[f"delivery_{d}"]) for d in DELIVERY]])
    lines += ["", "## Latency (measured period, µs)", ""]
    lines += _table(
        ("metric", *FIGURES),
        [[m, *(_num(run[f"{m}_{f}"], 1 if f == "mean" else 0) for f in FIGURES)] for m in METRICS],
    )
    if run["bad_lines"] or run["missing_files"]:
        lines += [
            "",
            f"**Input problems:** {run['bad_lines']} bad lines and "
            f"{run['missing_files']} missing files were skipped "
            "(see `summary/problems.parquet`).",
        ]
    lines += ["", "## Plots", ""] + [f"![{i}]({i})" for i in images]
    return "\n".join(lines) + "\n"


def report_run(run_dir: Path | str) -> Path:
    """Write ``report.md``, ``latency_percentiles.png`` and ``throughput.png`` into the run."""
    run_dir = Path(run_dir)
    run = catalog.read_run_table(run_dir, "runs").to_pylist()[0]
    windows = catalog.read_run_table(run_dir, "windows").to_pylist()
    latency = catalog.read_run_table(run_dir, "latency").to_pylist()
    hists = {
        r["metric"]: r["histogram"]
        for r in latency
        if r["window_index"] is None and r["histogram"] and r["count"]
    }
    images = []
    if hists:
        plots.plot_latency_distribution(
            hists, run_dir / "latency_percentiles.png", f"Latency by percentile: {run['run_id']}"
        )
        images.append("latency_percentiles.png")
    plots.plot_throughput(
        run_dir,
        run_dir / "throughput.png",
        run["warmup_end_ms"],
        f"Send vs receive throughput: {run['run_id']}",
    )
    images.append("throughput.png")
    out = run_dir / "report.md"
    out.write_text(run_markdown(run, windows, images))
    return out


def report_sweep(run_dirs: Sequence[Path | str], out_dir: Path | str) -> Path:
    """Throughput and p95 against client threads and nodes over several runs."""
    runs = [catalog.read_run_table(d, "runs").to_pylist()[0] for d in run_dirs]
    if len(runs) < 2:
        raise ArchiveError("a sweep report needs at least two runs")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs.sort(
        key=lambda r: (r["broker"], r["sender_nodes"], r["receiver_nodes"], r["sender_threads"])
    )
    plots.plot_sweep(
        runs,
        out_dir / "sweep_throughput.png",
        "send_msgs_per_s",
        "send msgs/s",
        "Throughput against threads and nodes",
    )
    plots.plot_sweep(
        runs,
        out_dir / "sweep_p95.png",
        "processing_us_p95",
        "processing latency p95 (ms)",
        "p95 against threads and nodes",
        scale=1 / 1000,
    )
    lines = ["# Sweep", "", f"<!-- mqlab sweep report, format_version {FORMAT_VERSION} -->", ""]
    lines += _table(
        ("run", "broker", *MQPERF_HEADER),
        [[r["run_id"], r["broker"], *mqperf_row(r)] for r in runs],
    )
    lines += ["", "![throughput](sweep_throughput.png)", "", "![p95](sweep_p95.png)", ""]
    out = out_dir / "sweep-report.md"
    out.write_text("\n".join(lines))
    return out
