"""A run's report as one model: the sections (:mod:`mqlab.report.model`) built once from
the run's summary tables, its manifest's fault log and its archive, that ``report.md``
(:mod:`mqlab.report.markdown`) and the site's run page
(:mod:`mqlab.report.site.run_page`) both render.

Every number shown comes from the run's summary tables; a figure the summary could not
compute is "unknown", with the summary's reason (shown on hover by the site)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqlab.analysis import faults as fault_figures
from mqlab.analysis import saturation, tables
from mqlab.analysis.context import CLOCK_PROBLEM
from mqlab.analysis.figures import FIGURES
from mqlab.analysis.schema import CHECKER, DELIVERY, OUT_OF_RANGE, ROLES
from mqlab.archive.layout import METRICS
from mqlab.published import base as published
from mqlab.published import sets as published_sets
from mqlab.report import cells as shown
from mqlab.report import distribution, plots, unknown
from mqlab.report.model import (
    Block,
    Bullets,
    Cell,
    Code,
    Facts,
    Link,
    Paragraph,
    Plot,
    Section,
    Strong,
    Table,
    Text,
)

TIMELINE_PNG = plots.TIMELINE_PNG
PERCENTILES_PNG = plots.PERCENTILES_PNG
DISTRIBUTION_TXT = distribution.DISTRIBUTION_TXT

# why a fault's figure is unknown, by the faults table's heading
FAULT_UNKNOWN = {
    "send p99 back": "no level before the fault, or never back",
    "processing p99 back": "no level before the fault, or never back",
}
FAULT_MESSAGES = {"sent in it": "sent", "of them lost": "lost", "recovered": "recovered"}
NO_MARKS = "the senders recorded no per-second seq marks (an archive from before them)"


@dataclass(frozen=True)
class RunReport:
    """What a run's report is built from: its ``runs`` row and other summary tables,
    the files written beside it (``images``), and its faults: the ``faults`` rows, or
    None when they cannot be read (``faults_unknown`` says why; ``fault_log`` is then the
    manifest's log of them)."""

    run: dict[str, Any]
    run_dir: Path
    windows: Sequence[dict[str, Any]] = ()
    images: Sequence[str] = ()
    problems: Sequence[dict[str, Any]] = ()
    faults: Sequence[dict[str, Any]] | None = ()
    faults_unknown: str | None = None
    fault_log: Sequence[dict[str, Any]] = field(default_factory=list)
    # a published set the renderer shows against the run in a section of its own (the
    # site's mqperf 2021 match): the report's "Published reference" leaves it out
    shown_apart: str | None = None


def facts(run: dict[str, Any] | None, scenario: dict[str, Any], manifest: dict[str, Any]) -> Facts:
    """What ran, when, with what clients and at what cost: from the ``runs`` row, or for a
    run not summarized (``run`` None) from its scenario and manifest."""
    got = run or {
        "scenario": scenario.get("name"),
        "broker": scenario.get("broker"),
        "profile": scenario.get("profile"),
        **{k: manifest.get(k) for k in ("status", "end_reason", "started_at", "ended_at")},
    }
    items: list[tuple[str, Text | None]] = [
        (
            "run",
            [
                *("scenario ", Code(str(got["scenario"])), ", broker ", Code(str(got["broker"]))),
                *(", profile ", Code(str(got["profile"])), ", status ", Code(str(got["status"]))),
                f" ({got['end_reason']})",
            ],
        ),
        ("times", f"started {got['started_at']}, ended {got['ended_at']}"),
    ]
    if run is not None:
        schedule = shown.schedule_text(scenario)
        items += [
            (
                "messages",
                f"message size {run['message_bytes']} bytes, batch {run['batch']}"
                + (f", {schedule}" if schedule else ""),
            ),
            ("clients", shown.clients_shape(run)),
            ("queues", shown.queues_note(run)),
            ("order", shown.order_text(run)),
            ("cost", shown.cost_text(run)),
            ("cluster", f"cluster {c}" if (c := run.get("cluster_target")) else None),
        ]
    if scenario.get("description"):
        items.append(("description", str(scenario["description"])))
    return Facts([(k, v) for k, v in items if v is not None])


def figure(run: dict[str, Any], key: str, digits: int = 0) -> Cell:
    """A ``runs`` figure as a cell: formatted as the report does, or "unknown" with the
    summary's reason."""
    value = run[key]
    return Cell(
        shown.num(value, digits), sort=value, why=unknown.why(run, key) or "not in the summary"
    )


def _mqperf(run: dict[str, Any]) -> Section:
    blocks: list[Block] = [Table(shown.MQPERF_HEADER, [shown.mqperf_row(run)], "llllrrrr")]
    marked = saturation.marks(run, run.get("stand_in"))
    if marked:
        where = [] if marked == ["stand-in"] else ["see the load generator section"]
        if run.get("stand_in"):
            b = run["broker"]
            served = f"{run['stand_in']} served, not {b} itself"
            where.insert(0, f"{served}: never quote these figures as {b}'s")
        blocks.append(Paragraph(["Marked ", Strong(", ".join(marked)), f": {'; '.join(where)}."]))
    return Section("mqperf table", blocks)


def _periods(run: dict[str, Any], window_p95: Sequence[int]) -> Section:
    origin = run["measure_start_ms"]
    warm = (run["warmup_end_ms"] - origin) / 1000
    rows: list[list[str | Cell]] = []
    for _, name in ROLES:
        seconds = run[f"{name}_period_s"]
        rows.append(
            [
                name,
                shown.secs(run[f"{name}_start_ms"], origin),
                shown.secs(run[f"{name}_end_ms"], origin),
                "nothing counted" if seconds is None else f"{seconds:,.3f}",
                figure(run, f"{name}_msgs_per_s"),
                figure(run, f"{name}_mb_per_s", 3),
            ]
        )
    blocks: list[Block] = [
        Paragraph(
            f"Times are seconds since the senders started ({origin} ms since the epoch). The "
            f"first {warm:g} s are warm-up and not counted. A role's period runs from its "
            "first counted interval to its last counted event (confirmed send, receive); "
            "throughput is the messages counted over that period."
        ),
        Table(("role", "from", "to", "seconds", "msgs/s", "MB/s"), rows, "lrrrrr"),
        Paragraph(
            f"Max sender lag: {shown.num(run['sender_lag_ms_max'])} ms (how far the slowest "
            "sender thread fell behind its fixed-rate schedule; 0 in closed loop)."
        ),
    ]
    if window_p95:
        blocks.append(
            Paragraph(
                f"Processing latency p95 per {run['window_s']:g} s window: worst "
                f"{shown.ms(max(window_p95))}, best {shown.ms(min(window_p95))} over "
                f"{len(window_p95)} windows."
            )
        )
    return Section("Measured periods", blocks)


def _load_generator(run: dict[str, Any]) -> Section:
    """Was the load generator the bottleneck: the marks and why, the CPU of each node."""
    section = json.loads(run["saturation"]) if run.get("saturation") else None
    blocks: list[Block] = []
    for sentence in saturation.explain(section):
        head, sep, rest = sentence.partition(":** ")
        if sentence.startswith("**") and sep:
            blocks.append(Paragraph(rest, lead=f"{head[2:]}:"))
        else:
            blocks.append(Paragraph(sentence))
    rows = shown.load_generator_rows(section)
    if rows:
        blocks += [Table(shown.LOAD_HEADER, rows, "llrrrr"), Paragraph(shown.LOAD_NOTE)]
    return Section("Load generator", blocks)


def _reasons(reasons: dict[str, str], figures: Sequence[str]) -> list[Text]:
    """One item per reason, naming every figure it makes unknown."""
    by_reason: dict[str, list[str]] = {}
    for f in figures:
        if f in reasons:
            by_reason.setdefault(reasons[f], []).append(f)
    return [f"{', '.join(fs)}: {why}" for why, fs in by_reason.items()]


def _share(run: dict[str, Any], d: str, share: float | None) -> str | Cell:
    """A checker figure's share of the messages sent ("" for the other figures)."""
    if d not in CHECKER:
        return ""
    if share is None:
        sent = run.get("delivery_sent")
        why = unknown.why(run, f"delivery_{d}") or (
            "nothing sent" if sent == 0 else unknown.why(run, "delivery_sent")
        )
        return Cell(unknown.UNKNOWN, why=why or "not in the summary")
    return Cell(shown.percent(share), sort=share)


def _delivery(run: dict[str, Any]) -> Section:
    reasons = unknown.reasons(run)
    shares = tables.fractions(run)
    rows: list[list[str | Cell]] = [
        [
            d.replace("_", " "),
            figure(run, f"delivery_{d}"),
            _share(run, d, shares.get(d)),
            shown.DELIVERY_MEANING[d],
        ]
        for d in DELIVERY
        if d != "undrained"
    ]
    blocks: list[Block] = [
        Table(("figure", "messages", "share of sent", "meaning"), rows, "lrrl", name="delivery"),
        Paragraph(
            "Jepsen's total-queue figures (lost, unexpected, duplicated, recovered), each "
            f"over the {shown.num(run['delivery_sent'])} messages sent.",
            lead="Share of sent:",
        ),
    ]
    undrained = run["delivery_undrained"]
    if undrained is None:
        text = "unknown (the reason is below); it is never counted as lost."
    else:
        text = (
            f"{undrained:,} message(s) were still in the broker when the receivers stopped; "
            "they are not counted as lost."
        )
    blocks.append(Paragraph(text, lead="Undrained:"))
    unknown_items = _reasons(reasons, DELIVERY)
    if unknown_items:
        blocks.append(
            Paragraph("(the summary could not compute them):", lead="Unknown figures", note=True)
        )
        blocks.append(Bullets(unknown_items))
    return Section("Delivery", blocks)


def _fault_reason(run: dict[str, Any], heading: str) -> str:
    if heading in FAULT_MESSAGES:
        return unknown.reasons(run).get(FAULT_MESSAGES[heading]) or NO_MARKS
    return FAULT_UNKNOWN.get(heading, "not in the summary")


def faults_section(r: RunReport) -> Section:
    """What each fault cost (a row per fault of the ``faults`` table), and the run's
    longest gaps. When the fault figures cannot be read, the faults of the manifest's log
    with every figure unknown and why."""
    run = r.run
    rows = r.faults if r.faults is not None else fault_figures.windows(list(r.fault_log))
    if not rows:
        if r.faults is None:
            why = r.faults_unknown or "the summary predates fault figures"
            text = f"{unknown.UNKNOWN}: {why} (run `mqlab summarize` on this run)."
        else:
            text = "None injected. " + shown.longest_gaps(run)
        return Section("Faults", [Paragraph(text)])
    body = []
    for f in rows:
        texts = shown.fault_row(f, run["measure_start_ms"])
        cells: list[str | Cell] = [texts[0]]
        for heading, text in zip(shown.FAULT_HEADER[1:], texts[1:], strict=True):
            why = r.faults_unknown or _fault_reason(run, heading)
            cells.append(Cell(text, why=why) if text == unknown.UNKNOWN else text)
        body.append(cells)
    blocks: list[Block] = []
    if r.faults is None:
        blocks.append(
            Paragraph(
                f"{r.faults_unknown or ''}. The faults are those of the manifest's log.",
                lead="Fault figures unknown:",
                note=True,
            )
        )
    shaded = " The timeline shades each fault." if TIMELINE_PNG in r.images else ""
    blocks += [
        Table(shown.FAULT_HEADER, body, "lrrrrrrrrrrr", name="faults"),
        Paragraph(shown.fault_note(run) + shaded),
    ]
    return Section("Faults", blocks)


def _latency(run: dict[str, Any]) -> Section:
    reasons = unknown.reasons(run)
    blocks: list[Block] = [
        Table(
            ("metric", *(f.replace("_", ".") for f in FIGURES)),
            [
                [
                    Cell(m, hint=shown.METRIC_MEANING.get(m)),
                    *(figure(run, f"{m}_{f}", 1 if f == "mean" else 0) for f in FIGURES),
                ]
                for m in METRICS
            ],
            "l" + "r" * len(FIGURES),
            name="latency",
        ),
        Bullets([[Code(m), f": {shown.METRIC_MEANING[m]}"] for m in METRICS]),
    ]
    clamped: list[Text] = []
    for m in METRICS:
        below, above = (run[f"{m}_{o}"] for o in OUT_OF_RANGE)
        if below or above:
            clamped.append(f"{m}: {below or 0:,} below zero, {above or 0:,} above 1 h")
    if clamped:
        blocks.append(
            Paragraph(
                [
                    Strong("Latency values out of range"),
                    ", recorded clamped at 0 or at the histogram's 1 h maximum (below zero: "
                    "clock steps or skew between hosts), so percentiles near them are bounds:",
                ],
                note=True,
            )
        )
        blocks.append(Bullets(clamped))
    unknown_items = _reasons(reasons, [f"{m}_{o}" for m in METRICS for o in OUT_OF_RANGE])
    if unknown_items:
        blocks += [
            Paragraph([Strong("Out-of-range counts unknown:")], note=True),
            Bullets(unknown_items),
        ]
    return Section("Latency (measured period, µs)", blocks)


def published_blocks(block: published.Block) -> list[Block]:
    """One reference block: its table (titled) and its notes."""
    rows = [
        [
            Cell(shown.published_cell(c), why="not published, or not measured by this run")
            if c is None
            else Cell(shown.published_cell(c), sort=c if isinstance(c, int | float) else None)
            for c in row
        ]
        for row in block.rows
    ]
    out: list[Block] = [Table(block.headers, rows, caption=block.title)]
    if block.notes:
        out.append(Bullets(list(block.notes)))
    return out


def published_section(
    run: dict[str, Any], run_dir: Path, apart: str | None = None
) -> Section | None:
    """The published experiment the run's scenario reproduces (``[reference]``), next to
    the run, laid out as its seed does; None when it names none, or the set ``apart``."""
    ref = published.of_run(run_dir)
    if ref is None or ref[0] == apart:
        return None
    name, experiment = ref
    try:
        dataset = published_sets.get(name)
    except published.ReferenceError as err:
        return Section("Published reference", [Paragraph(f"Unknown: {err}.", note=True)])
    blocks: list[Block] = [Paragraph(f"{name}, {experiment}: {dataset.source}.")]
    for block in dataset.blocks([run], experiment):
        blocks += published_blocks(block)
    return Section("Published reference", blocks)


def _plots(r: RunReport) -> list[Section]:
    if TIMELINE_PNG in r.images:
        timeline: list[Block] = [
            Paragraph(shown.TIMELINE_NOTE),
            Plot(TIMELINE_PNG, "timeline"),
        ]
    else:
        timeline = [Paragraph("No per-second figures (the timeline table is empty).", note=True)]
    if PERCENTILES_PNG in r.images:
        percentiles: list[Block] = [
            Plot(PERCENTILES_PNG, "percentiles"),
            Paragraph(
                "The HdrHistogram percentile plot: the x axis is 1/(1−p) on a log scale, so "
                "each tick to the right is one more nine."
            ),
        ]
    else:
        percentiles = [Paragraph("No latency values (every histogram is empty).", note=True)]
    if DISTRIBUTION_TXT in r.images:
        percentiles.append(
            Paragraph(
                [
                    "Each latency's whole distribution as text, listed as HdrHistogram lists "
                    "one (value at each percentile step, with the count up to it): ",
                    Link(DISTRIBUTION_TXT, DISTRIBUTION_TXT),
                    ".",
                ]
            )
        )
    return [Section("Timeline", timeline), Section("Latency by percentile", percentiles)]


def _problems(r: RunReport) -> Section | None:
    run = r.run
    # the clock's problem line is shown with the clocks
    problems = [p for p in r.problems if not str(p["problem"]).startswith(CLOCK_PROBLEM)]
    if not (run["bad_lines"] or run["missing_files"] or problems):
        return None
    items: list[Text] = [
        [Code(shown.problem_where(p, r.run_dir)), f": {p['problem']}"]
        for p in problems[: shown.MAX_PROBLEMS_SHOWN]
    ]
    if len(problems) > shown.MAX_PROBLEMS_SHOWN:
        items.append(f"… and {len(problems) - shown.MAX_PROBLEMS_SHOWN} more")
    intro = Paragraph(
        [
            f"{run['bad_lines']} bad line(s) and {run['missing_files']} missing or unreadable "
            "file(s) were skipped and counted (all of them in ",
            Code("summary/problems.parquet"),
            "):",
        ]
    )
    return Section("Input problems", [intro, Bullets(items)])


def run_sections(r: RunReport) -> list[Section]:
    """The report's sections, in order; a section with nothing to say is left out."""
    run = r.run
    worst = [w["processing_us_p95"] for w in r.windows if w["processing_us_count"]]
    sections: list[Section | None] = [
        _mqperf(run),
        _periods(run, worst),
        _load_generator(run),
        shown.clocks_section(run),
        _delivery(run),
        faults_section(r),
        _latency(run),
        published_section(run, r.run_dir, r.shown_apart),
        *_plots(r),
        _problems(r),
    ]
    return [s for s in sections if s is not None]
