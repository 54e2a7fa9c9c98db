"""The site's experiments: the runs grouped by the folder they sit in and their scenario
family (the published set a scenario reproduces, else its name without the broker), the
user's own runs (those git does not track) first; and a page per experiment.

An experiment page lists its runs as the index does, draws its sweep (throughput and
p95 against threads and nodes, :func:`plots.plot_sweep`), and for a published set lays
the runs beside the published rows as the report does (the set's blocks, with their
set-up differences and stand-in marks, :func:`run_report.published_blocks`); for mqperf
2021 a chart per broker puts its runs beside the published rows
(:func:`charts.plot_against_published`)."""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqlab.published import base as published
from mqlab.published import reference
from mqlab.published import sets as published_sets
from mqlab.report import charts, plots
from mqlab.report.against import REFERENCE
from mqlab.report.run_report import published_blocks
from mqlab.report.site.gather import SiteRun
from mqlab.report.site.html import block_html, esc, filter_box, page, table

LOG = logging.getLogger(__name__)

OWN = "your runs"


@dataclass
class Experiment:
    folder: str
    family: str
    own: bool
    runs: list[SiteRun] = field(default_factory=list)
    reference: str | None = None  # the published set every run reproduces, if one

    @property
    def title(self) -> str:
        where = "" if self.folder == "." else f"{self.folder}: "
        return f"{where}{self.family}" + (f" ({OWN})" if self.own else "")

    @property
    def slug(self) -> str:
        text = f"{'own-' if self.own else ''}{self.folder}-{self.family}".lower()
        return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "runs"

    @property
    def href(self) -> str:
        return f"experiments/{self.slug}.html"

    @property
    def brokers(self) -> list[str]:
        return sorted({r.ls["broker"] for r in self.runs})

    @property
    def summarized(self) -> list[dict[str, Any]]:
        return [r.run for r in self.runs if r.run is not None]


def family(r: SiteRun) -> str:
    """The published set the run's scenario reproduces; else its scenario name without
    the broker's name (``kafka-short`` -> ``short``)."""
    ref = published.of_run(r.path)
    if ref is not None:
        return ref[0]
    name, broker = r.ls["scenario"], r.ls["broker"]
    words = [w for w in name.split("-") if w != broker]
    return "-".join(words) or name


def tracked_runs(results_dir: Path | str) -> set[Path] | None:
    """The run directories under ``results_dir`` whose manifest git tracks (committed
    runs); None when ``results_dir`` is not in a git work tree (then no run is marked
    as the user's own)."""
    root = Path(results_dir).resolve()
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", "."],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {
        (root / line).parent for line in out.split("\0") if line.endswith("manifest.json") and line
    }


def group(runs: Sequence[SiteRun], results_dir: Path | str) -> list[Experiment]:
    """The experiments of ``runs``: the user's own first, then by folder and family."""
    tracked = tracked_runs(results_dir)
    groups: dict[tuple[bool, str, str], Experiment] = {}
    for r in runs:
        own = tracked is not None and r.path.resolve() not in tracked
        key = (own, r.listed.folder, family(r))
        groups.setdefault(key, Experiment(key[1], key[2], own)).runs.append(r)
    for ex in groups.values():
        refs = {published.of_run(r.path) for r in ex.runs}
        names = {ref[0] for ref in refs if ref}
        if len(names) == 1 and None not in refs:
            ex.reference = names.pop()
    return sorted(groups.values(), key=lambda e: (not e.own, e.folder, e.family))


# -- an experiment's page ------------------------------------------------------------
def _sweep(ex: Experiment, out: Path) -> str:
    runs = ex.summarized
    if len(runs) < 2:
        return ""
    runs = sorted(
        runs,
        key=lambda r: (r["broker"], r["sender_nodes"], r["receiver_nodes"], r["sender_threads"]),
    )
    plots.plot_sweep(
        runs, out / "sweep_throughput.png", "send_msgs_per_s", "send msgs/s", "Throughput"
    )
    plots.plot_sweep(
        runs,
        out / "sweep_p95.png",
        "processing_us_p95",
        "processing latency p95 (ms)",
        "p95",
        scale=1 / 1000,
    )
    imgs = "".join(
        f'<figure><a href="{ex.slug}/{n}"><img src="{ex.slug}/{n}" alt="{a}" class="plot">'
        "</a></figure>"
        for n, a in (("sweep_throughput.png", "throughput"), ("sweep_p95.png", "p95"))
    )
    return (
        "<h2>Sweep</h2><p>Every summarized run of the experiment: send msgs/s and processing "
        "p95 against sender threads, a line per nodes (as the sweep report draws them).</p>" + imgs
    )


def _mqperf_charts(ex: Experiment, out: Path) -> str:
    """A chart per broker: its runs beside mqperf 2021's published rows."""
    rows = reference.load_reference(REFERENCE)
    parts = []
    for broker in ex.brokers:
        runs = [r for r in ex.summarized if r["broker"] == broker]
        published_rows = reference.broker_rows(broker, rows)
        if not runs:
            continue
        name = f"mqperf-{re.sub(r'[^a-z0-9]+', '-', broker.lower())}.png"
        charts.plot_against_published(broker, runs, published_rows, out / name)
        note = "" if published_rows else f" ({esc(REFERENCE)} has no rows for {esc(broker)})"
        parts.append(
            f'<h3 id="chart-{esc(broker)}">{esc(broker)}</h3><p class=note>{len(runs)} run(s), '
            f"{len(published_rows)} published row(s){note}.</p>"
            f'<figure><a href="{ex.slug}/{name}"><img src="{ex.slug}/{name}" '
            f'alt="{esc(broker)} against mqperf 2021" class="plot chart"></a></figure>'
        )
    if not parts:
        return ""
    return (
        "<h2>Against mqperf 2021: per broker</h2><p>Send and receive msgs/s and processing "
        "p95 (log scale) against threads per node and sender-receiver nodes: the local "
        "runs (dots) and the rows mqperf 2021 published (squares). The tables below have "
        "every figure and the set-up differences.</p>" + "".join(parts)
    )


def _published(ex: Experiment) -> str:
    if ex.reference is None or not ex.summarized:
        return ""
    try:
        dataset = published_sets.get(ex.reference)
    except published.ReferenceError as err:
        return f"<p class=note>Published set unknown: {esc(err)}</p>"
    blocks = dataset.blocks(ex.summarized, None)
    html = "".join(block_html(b) for block in blocks for b in published_blocks(block))
    return (
        f'<h2 id="published">Beside {esc(ex.reference)} (published)</h2>'
        f"<p class=source>{esc(dataset.source)}</p>"
        "<p>The runs laid out as the article lays out its rows, as <code>mqlab compare "
        f"--reference {esc(ex.reference)}</code> and each run's report show them; the notes "
        "under each table say where the set-up differs and which runs are marked.</p>"
        f'<div id="published-blocks">{html}</div>'
    )


def experiment_page(
    ex: Experiment, rows_html: list[str], header: Sequence[Any], matrix: str, out: Path
) -> str:
    """The page of one experiment (``rows_html`` its runs' rows, ``matrix`` the HTML of
    its durability matrix); its plots are written into ``out/<slug>/``."""
    (out / ex.slug).mkdir(parents=True, exist_ok=True)
    charts_html = _mqperf_charts(ex, out / ex.slug) if ex.reference == REFERENCE else ""
    body = f"""<h1>{esc(ex.title)}</h1>
<dl class="facts"><dt>folder</dt><dd><code>{esc(ex.folder)}</code></dd>
<dt>scenario family</dt><dd>{esc(ex.family)}</dd>
<dt>runs</dt><dd>{len(ex.runs)} ({len(ex.summarized)} summarized)</dd>
<dt>brokers</dt><dd>{esc(", ".join(ex.brokers))}</dd>
<dt>published set</dt><dd>{esc(ex.reference or "none")}</dd></dl>
{charts_html}
{_published(ex)}
{_sweep(ex, out / ex.slug)}
{matrix}
<h2>Runs</h2>
{filter_box("runs", "e.g. nats complete", "runs")}
<div class="wide">{table(header, rows_html, table_id="runs")}</div>"""
    return page(ex.title, body, root="../", current="Experiments")
