"""``report.md`` and PNG plots for summarized runs, and a sweep report over several.

Every number shown comes from the run's summary tables (``summary/*.parquet``); the
report only formats them. A figure the summary could not compute is null there and
shown as "unknown", with the summary's reason.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqlab.analysis import catalog, saturation, tables
from mqlab.analysis.context import CLOCK_PROBLEM
from mqlab.analysis.figures import FIGURES
from mqlab.analysis.schema import CHECKER, DELIVERY, OUT_OF_RANGE, ROLES
from mqlab.archive.layout import METRICS, read_scenario
from mqlab.errors import ArchiveError
from mqlab.published import base as published
from mqlab.published import sets as published_sets
from mqlab.report import distribution, plots, unknown
from mqlab.report.cells import (
    DELIVERY_MEANING,
    FAULT_HEADER,
    LOAD_HEADER,
    LOAD_NOTE,
    MAX_PROBLEMS_SHOWN,
    METRIC_MEANING,
    MQPERF_HEADER,
    TIMELINE_NOTE,
    clients_shape,
    clocks_section,
    cost_text,
    fault_note,
    fault_row,
    load_generator_rows,
    longest_gaps,
    mqperf_row,
    ms,
    num,
    order_lines,
    percent,
    problem_where,
    published_cell,
    queues_note,
    schedule_text,
    secs,
)
from mqlab.report.model import markdown_table, section_markdown

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 2
TIMELINE_PNG = plots.TIMELINE_PNG
PERCENTILES_PNG = plots.PERCENTILES_PNG
DISTRIBUTION_TXT = distribution.DISTRIBUTION_TXT


def _header(run: dict[str, Any], scenario: dict[str, Any]) -> list[str]:
    schedule = schedule_text(scenario)
    return [
        f"# {run['run_id']}",
        "",
        f"<!-- mqlab report, format_version {FORMAT_VERSION} -->",
        "",
        f"- scenario `{run['scenario']}`, broker `{run['broker']}`, profile "
        f"`{run['profile']}`, status `{run['status']}` ({run['end_reason']})",
        f"- started {run['started_at']}, ended {run['ended_at']}",
        f"- message size {run['message_bytes']} bytes, batch {run['batch']}"
        + (f", {schedule}" if schedule else ""),
        f"- {clients_shape(run)}",
        *([f"- {q}"] if (q := queues_note(run)) else []),
        *order_lines(run),
        *([f"- {c}"] if (c := cost_text(run, lambda s: f"`{s}`")) else []),
        "",
    ]


def _periods(run: dict[str, Any], window_p95: list[int]) -> list[str]:
    origin = run["measure_start_ms"]
    warm = (run["warmup_end_ms"] - origin) / 1000
    lines = [
        "## Measured periods",
        "",
        f"Times are seconds since the senders started ({origin} ms since the epoch). The "
        f"first {warm:g} s are warm-up and not counted. A role's period runs from its first "
        "counted interval to its last counted event (confirmed send, receive); throughput "
        "is the messages counted over that period.",
        "",
    ]
    rows = []
    for _, name in ROLES:
        seconds = run[f"{name}_period_s"]
        rows.append(
            [
                name,
                secs(run[f"{name}_start_ms"], origin),
                secs(run[f"{name}_end_ms"], origin),
                "nothing counted" if seconds is None else f"{seconds:,.3f}",
                num(run[f"{name}_msgs_per_s"]),
                num(run[f"{name}_mb_per_s"], 3),
            ]
        )
    lines += markdown_table(("role", "from", "to", "seconds", "msgs/s", "MB/s"), rows, "lrrrrr")
    lines += [
        "",
        f"Max sender lag: {num(run['sender_lag_ms_max'])} ms (how far the slowest sender "
        "thread fell behind its fixed-rate schedule; 0 in closed loop).",
    ]
    if window_p95:
        lines += [
            "",
            f"Processing latency p95 per {run['window_s']:g} s window: worst "
            f"{ms(max(window_p95))}, best {ms(min(window_p95))} over {len(window_p95)} "
            "windows.",
        ]
    return lines


def _reasons(reasons: dict[str, str], figures: Sequence[str]) -> list[str]:
    """One line per reason, naming every figure it makes unknown."""
    by_reason: dict[str, list[str]] = {}
    for f in figures:
        if f in reasons:
            by_reason.setdefault(reasons[f], []).append(f)
    return [f"- {', '.join(fs)}: {why}" for why, fs in by_reason.items()]


def _delivery(run: dict[str, Any], reasons: dict[str, str]) -> list[str]:
    lines = ["## Delivery", ""]
    lines += markdown_table(
        ("figure", "messages", "meaning"),
        [
            [d.replace("_", " "), num(run[f"delivery_{d}"]), DELIVERY_MEANING[d]]
            for d in DELIVERY
            if d != "undrained"
        ],
        "lrl",
    )
    share = tables.fractions(run)
    lines += [
        "",
        f"**Of the {num(run['delivery_sent'])} messages sent** (Jepsen's total-queue figures): "
        + ", ".join(f"{k} {percent(share[k])}" for k in CHECKER)
        + ".",
    ]
    undrained = run["delivery_undrained"]
    lines.append("")
    if undrained is None:
        lines.append("**Undrained:** unknown (the reason is below); it is never counted as lost.")
    else:
        lines.append(
            f"**Undrained:** {undrained:,} message(s) were still in the broker when the "
            "receivers stopped; they are not counted as lost."
        )
    unknown_lines = _reasons(reasons, DELIVERY)
    if unknown_lines:
        lines += [
            "",
            "**Unknown figures** (the summary could not compute them):",
            "",
            *unknown_lines,
        ]
    return lines


def _out_of_range(run: dict[str, Any], reasons: dict[str, str]) -> list[str]:
    shown = []
    for m in METRICS:
        below, above = (run[f"{m}_{o}"] for o in OUT_OF_RANGE)
        if below or above:
            shown.append(f"- {m}: {below or 0:,} below zero, {above or 0:,} above 1 h")
    keys = [f"{m}_{o}" for m in METRICS for o in OUT_OF_RANGE]
    unknown_lines = _reasons(reasons, keys)
    lines = []
    if shown:
        lines += [
            "",
            "**Latency values out of range**, recorded clamped at 0 or at the histogram's 1 h "
            "maximum (below zero: clock steps or skew between hosts), so percentiles near "
            "them are bounds:",
            "",
            *shown,
        ]
    if unknown_lines:
        lines += ["", "**Out-of-range counts unknown:**", "", *unknown_lines]
    return lines


def _latency(run: dict[str, Any], reasons: dict[str, str]) -> list[str]:
    lines = ["## Latency (measured period, µs)", ""]
    lines += markdown_table(
        ("metric", *(f.replace("_", ".") for f in FIGURES)),
        [[m, *(num(run[f"{m}_{f}"], 1 if f == "mean" else 0) for f in FIGURES)] for m in METRICS],
        "l" + "r" * len(FIGURES),
    )
    lines += ["", *(f"- `{m}`: {METRIC_MEANING[m]}" for m in METRICS)]
    return lines + _out_of_range(run, reasons)


def _problems(run: dict[str, Any], problems: list[dict[str, Any]], run_dir: Path) -> list[str]:
    # the clock's problem line is shown with the clocks
    problems = [p for p in problems if not str(p["problem"]).startswith(CLOCK_PROBLEM)]
    if not (run["bad_lines"] or run["missing_files"] or problems):
        return []
    lines = [
        "## Input problems",
        "",
        f"{run['bad_lines']} bad line(s) and {run['missing_files']} missing or unreadable "
        "file(s) were skipped and counted (all of them in `summary/problems.parquet`):",
        "",
    ]
    for p in problems[:MAX_PROBLEMS_SHOWN]:
        lines.append(f"- `{problem_where(p, run_dir)}`: {p['problem']}")
    if len(problems) > MAX_PROBLEMS_SHOWN:
        lines.append(f"- … and {len(problems) - MAX_PROBLEMS_SHOWN} more")
    return lines


def run_markdown(
    run: dict[str, Any],
    windows: list[dict[str, Any]],
    images: Sequence[str],
    problems: list[dict[str, Any]] | None = None,
    scenario: dict[str, Any] | None = None,
    run_dir: Path | None = None,
    faults: Sequence[dict[str, Any]] | None = (),
) -> str:
    """The report of one ``runs`` row (with its windows, problems, faults and written
    images)."""
    reasons = unknown.reasons(run)
    worst = [w["processing_us_p95"] for w in windows if w["processing_us_count"]]
    lines = _header(run, scenario or {})
    lines += [
        "## mqperf table",
        "",
        *markdown_table(MQPERF_HEADER, [mqperf_row(run)], "llllrrrr"),
        "",
    ]
    marked = saturation.marks(run, run.get("stand_in"))
    if marked:
        where = [] if marked == ["stand-in"] else ["see the load generator section"]
        if run.get("stand_in"):
            b = run["broker"]
            served = f"{run['stand_in']} served, not {b} itself"
            where.insert(0, f"{served}: never quote these figures as {b}'s")
        lines += [f"Marked **{', '.join(marked)}**: {'; '.join(where)}.", ""]
    lines += _periods(run, worst)
    lines += ["", *_load_generator(run)]
    clocks = clocks_section(run)
    if clocks:
        lines += ["", *section_markdown(clocks)]
    lines += ["", *_delivery(run, reasons), ""]
    lines += [*_faults(run, faults), ""]
    lines += _latency(run, reasons)
    lines += _published(run, run_dir)
    if TIMELINE_PNG in images:
        lines += ["", "## Timeline", "", TIMELINE_NOTE, "", f"![timeline]({TIMELINE_PNG})"]
    else:
        lines += ["", "## Timeline", "", "No per-second figures (the timeline table is empty)."]
    if PERCENTILES_PNG in images:
        lines += ["", "## Latency by percentile", "", f"![percentiles]({PERCENTILES_PNG})"]
    if DISTRIBUTION_TXT in images:
        lines += [
            "",
            "Each latency's whole distribution as text, listed as HdrHistogram lists one "
            "(value at each percentile step, with the count up to it): "
            f"[{DISTRIBUTION_TXT}]({DISTRIBUTION_TXT}).",
        ]
    extra = _problems(run, problems or [], run_dir or Path(run["run_dir"]))
    if extra:
        lines += ["", *extra]
    return "\n".join(lines) + "\n"


def published_block(block: published.Block) -> list[str]:
    """One reference block as markdown: its title, table and notes."""
    lines = [f"**{block.title}**", ""]
    lines += markdown_table(block.headers, [[published_cell(c) for c in r] for r in block.rows])
    lines += [""] + [f"- {n}" for n in block.notes] + ([""] if block.notes else [])
    return lines


def _published(run: dict[str, Any], run_dir: Path | None) -> list[str]:
    """The published experiment the run's scenario reproduces, next to the run."""
    ref = published.of_run(run_dir or Path(run["run_dir"]))
    if ref is None:
        return []
    name, experiment = ref
    try:
        dataset = published_sets.get(name)
    except published.ReferenceError as err:
        return ["", "## Published reference", "", f"Unknown: {err}."]
    lines = ["", "## Published reference", "", f"{name}, {experiment}: {dataset.source}.", ""]
    for block in dataset.blocks([run], experiment):
        lines += published_block(block)
    return lines


def _load_generator(run: dict[str, Any]) -> list[str]:
    """Was the load generator the bottleneck: CPU per node, the marks and why."""
    section = json.loads(run["saturation"]) if run.get("saturation") else None
    lines = ["## Load generator", ""]
    for sentence in saturation.explain(section):
        lines += [sentence, ""]
    rows = load_generator_rows(section)
    if rows:
        lines += [*markdown_table(LOAD_HEADER, rows, "llrrrr"), "", LOAD_NOTE, ""]
    return lines[:-1]


def _faults(run: dict[str, Any], faults: Sequence[dict[str, Any]] | None) -> list[str]:
    """What each fault cost (the ``faults`` table; None: the summary has none), and the
    run's longest gaps."""
    if faults is None:
        return [
            "## Faults",
            "",
            f"{unknown.UNKNOWN}: the summary predates fault figures "
            "(run `mqlab summarize` on this run).",
        ]
    if not faults:
        return ["## Faults", "", "None injected. " + longest_gaps(run)]
    rows = [fault_row(f, run["measure_start_ms"]) for f in faults]
    return [
        "## Faults",
        "",
        *markdown_table(FAULT_HEADER, rows, "lrrrrrrrrrrr"),
        "",
        fault_note(run),
    ]


def _manifest_faults(run_dir: Path) -> list[dict[str, Any]]:
    try:
        faults = json.loads((run_dir / "manifest.json").read_text()).get("faults") or []
    except (OSError, ValueError) as err:
        LOG.warning("%s: no faults drawn (%s)", run_dir / "manifest.json", err)
        return []
    return list(faults)


def report_run(run_dir: Path | str) -> Path:
    """Write ``report.md``, ``timeline.png``, ``latency_percentiles.png`` and
    ``latency_distribution.txt`` into the run."""
    run_dir = Path(run_dir)
    run = catalog.read_run_table(run_dir, "runs").to_pylist()[0]
    windows = catalog.read_run_table(run_dir, "windows").to_pylist()
    latency = catalog.read_run_table(run_dir, "latency").to_pylist()
    timeline = catalog.read_run_table(run_dir, "timeline").to_pylist()
    problems = catalog.read_run_table(run_dir, "problems").to_pylist()
    try:
        scenario = read_scenario(run_dir)
    except ArchiveError as err:
        LOG.warning("%s", err)
        scenario = {}
    faults = _manifest_faults(run_dir)
    images = plots.plot_run(run, latency, timeline, run_dir, faults)  # the site draws the same
    if distribution.write_distribution(run, latency, run_dir) is not None:
        images = [*images, DISTRIBUTION_TXT]
    out = run_dir / "report.md"
    try:
        fault_rows = catalog.read_run_table(run_dir, "faults").to_pylist()
    except ArchiveError as err:
        LOG.warning("%s", err)
        fault_rows = None
    out.write_text(run_markdown(run, windows, images, problems, scenario, run_dir, fault_rows))
    return out
