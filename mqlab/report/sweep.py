"""The sweep report (``sweep-report.md``) over several runs: their mqperf rows and, for
the runs that injected faults, the durability matrix (a row per run, a column per fault)
that the site's index shows too."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqlab.analysis import catalog
from mqlab.archive import faultlog
from mqlab.errors import ArchiveError
from mqlab.report import plots, unknown
from mqlab.report.cells import MQPERF_HEADER, mqperf_row, num, seconds
from mqlab.report.markdown import FORMAT_VERSION
from mqlab.report.model import Block, Paragraph, Plot, Section, Table, section_markdown

LOG = logging.getLogger(__name__)


#: a column's suffix for a run whose receivers were behind (summary's saturation): a fault
#: then strikes while the queue holds a backlog, which is what an asynchronous profile
#: loses on a failover (at a low fixed rate nothing is waiting, and every cell reads 0)
BEHIND = " (receivers behind)"


def _fault_column(f: dict[str, Any], run: dict[str, Any] | None = None) -> str:
    """A matrix column: the fault's action; a partition with its kind; either with
    :data:`BEHIND` when the run's receivers were behind."""
    if f["action"] == faultlog.PARTITION:
        column = f"partition: {f.get('kind') or '?'}"
    else:
        column = str(f["action"])
    return column + (BEHIND if run is not None and run.get("receivers_behind") else "")


def matrix_columns(entries: Sequence[tuple[Any, Sequence[dict[str, Any]] | None]]) -> list[str]:
    """The durability matrix's columns: each kind of fault of the entries' runs (their
    ``faults`` rows), in the order first met, those struck behind a backlog last."""
    columns: list[str] = []
    for run, faults in entries:
        for f in faults or []:
            if _fault_column(f, run) not in columns:
                columns.append(_fault_column(f, run))
    return sorted(columns, key=lambda c: c.endswith(BEHIND))


def matrix_cells(
    faults: Sequence[dict[str, Any]] | None,
    columns: Sequence[str],
    run: dict[str, Any] | None = None,
) -> list[str]:
    """A run's cells of the durability matrix, one per column: what its faults of that
    kind cost ("–": none of that kind; "unknown" in each when ``faults`` is None)."""
    if faults is None:
        return [unknown.UNKNOWN] * len(columns)

    def cell(fs: list[dict[str, Any]]) -> str:
        return " / ".join(
            f"lost {num(f.get('lost'))} · duplicated {num(f.get('duplicated'))} · "
            f"{seconds(f.get('unavailable_send_s'))}"
            for f in fs
        )

    return [cell([f for f in faults if _fault_column(f, run) == c]) or "–" for c in columns]


MATRIX_NOTE = (
    "Each cell: of the messages sent while the fault lasted, how many were lost and how "
    "many were delivered more than once; the seconds without a confirmed send. A column "
    f"marked{BEHIND} holds runs whose receivers were behind their senders: the fault "
    "struck while the queue held a backlog, where an asynchronous profile's failover loses "
    "what its leader had confirmed but not yet copied"
)


def fault_matrix(
    entries: Sequence[tuple[dict[str, Any], Sequence[dict[str, Any]] | None]],
) -> Section | None:
    """The durability matrix of several runs: a row per run (broker and profile), a column
    per kind of fault, in each cell what that fault cost: the messages sent while it
    lasted that were lost and that were delivered more than once, and the seconds without
    a confirmed send. None when no run had a fault."""
    columns = matrix_columns(entries)
    if not columns:
        return None
    rows = [
        [run["broker"], run["profile"], *matrix_cells(faults, columns, run)]
        for run, faults in entries
    ]
    return Section(
        "Durability matrix",
        [
            Paragraph(f"{MATRIX_NOTE} (each run's report.md has every figure of every fault)."),
            Table(("broker", "profile", *columns), rows, "ll" + "l" * len(columns)),
        ],
    )


def sweep_sections(
    runs: Sequence[dict[str, Any]],
    entries: Sequence[tuple[dict[str, Any], Sequence[dict[str, Any]] | None]],
) -> list[Section]:
    """The sweep report's sections: the runs' mqperf rows and plots, and the durability
    matrix of ``entries`` (each run with its ``faults`` rows)."""
    blocks: list[Block] = [
        Table(
            ("run", "broker", *MQPERF_HEADER, "Lost", "Undrained"),
            [
                [
                    r["run_id"],
                    r["broker"],
                    *mqperf_row(r),
                    num(r["delivery_lost"]),
                    num(r["delivery_undrained"]),
                ]
                for r in runs
            ],
            "llllllrrrrrr",
        )
    ]
    if any(r["delivery_lost"] is None or r["delivery_undrained"] is None for r in runs):
        blocks.append(Paragraph("Unknown figures: see each run's report.md for why."))
    blocks += [Plot("sweep_throughput.png", "throughput"), Plot("sweep_p95.png", "p95")]
    matrix = fault_matrix(entries)
    return [Section("Runs", blocks), *([matrix] if matrix else [])]


def report_sweep(run_dirs: Sequence[Path | str], out_dir: Path | str) -> Path:
    """Throughput and p95 against client threads and nodes over several runs."""
    runs_in_order = [catalog.read_run_table(d, "runs").to_pylist()[0] for d in run_dirs]
    runs = list(runs_in_order)
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
    entries = []
    for d, r in zip(run_dirs, runs_in_order, strict=True):
        try:
            entries.append((r, catalog.read_run_table(d, "faults").to_pylist()))
        except ArchiveError as err:
            LOG.warning("%s", err)
            entries.append((r, None))
    lines = ["# Sweep", "", f"<!-- mqlab sweep report, format_version {FORMAT_VERSION} -->"]
    for section in sweep_sections(runs, entries):
        lines += ["", *section_markdown(section)]
    out = out_dir / "sweep-report.md"
    out.write_text("\n".join(lines) + "\n")
    return out
