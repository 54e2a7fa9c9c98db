"""A run's page of the site: its facts, its mqperf row and load generator, clocks,
measured periods, delivery, faults and latency as `mqlab report` shows them (the report's
cells and meanings, :mod:`mqlab.report.cells`), its plots, the published rows it matches,
its problems, and its archived scenario and manifest."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mqlab.analysis import saturation, tables
from mqlab.analysis.figures import FIGURES
from mqlab.analysis.schema import CHECKER, DELIVERY, OUT_OF_RANGE, ROLES
from mqlab.archive.layout import METRICS, SCENARIO
from mqlab.published import base as published
from mqlab.published import reference
from mqlab.published import sets as published_sets
from mqlab.report import cells as shown
from mqlab.report import unknown
from mqlab.report.plots import PERCENTILES_PNG, TIMELINE_PNG
from mqlab.report.site.gather import SiteRun
from mqlab.report.site.html import (
    esc,
    figure,
    page,
    pre,
    section_html,
    table,
    td,
    tr,
)
from mqlab.report.site.pages import REFERENCE, REFERENCE_LABEL, fault_rows, ms_cell

UNDRAINED_MEANING = "still in the broker when the receivers stopped (never counted as lost)"


def _facts(r: SiteRun) -> str:
    info = r.listed.info
    run = r.run or {}
    sc = info.scenario
    m = info.manifest
    items = [
        ("scenario", sc.get("name")),
        ("broker", sc.get("broker")),
        ("profile", sc.get("profile")),
        ("status", f"{run.get('status') or m.get('status')} ({m.get('end_reason')})"),
        ("started", m.get("started_at")),
        ("ended", m.get("ended_at")),
    ]
    if run:
        schedule = shown.schedule_text(sc)
        items += [
            (
                "messages",
                f"{run['message_bytes']} bytes, batch {run['batch']}"
                + (f", {schedule}" if schedule else ""),
            ),
            (
                "clients",
                shown.clients_shape(run),
            ),
            ("cluster", run.get("cluster_target")),
        ]
        if cost := shown.cost_text(run):
            items.append(("cost", cost))
    if sc.get("description"):
        items.append(("description", sc["description"]))
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items if v is not None)
    return f'<dl class="facts">{dl}</dl>'


def _clocks(run: dict[str, Any]) -> str:
    """The report's clock section (runs on several hosts, or with a bound unknown or over
    budget) as HTML: its paragraphs and its table of host offsets, in order."""
    section = shown.clocks_section(run)
    return "" if section is None else section_html(section)


def _mqperf_table(run: dict[str, Any]) -> str:
    cells = shown.mqperf_row(run)  # the report's row: same figures, same format
    return table(shown.MQPERF_HEADER, [tr(td(c) for c in cells)], sortable=False)


def _reference_rows(match: reference.ReferenceMatch) -> str:
    run = match.run
    rows = [
        tr(
            [
                td("mqlab (measured period)"),
                figure(run["send_msgs_per_s"], ",.0f", unknown.why(run, "send_msgs_per_s")),
                figure(run["receive_msgs_per_s"], ",.0f", unknown.why(run, "receive_msgs_per_s")),
                ms_cell(run["processing_us_p95"], unknown.why(run, "processing_us_p95")),
                ms_cell(run["send_call_us_p95"], unknown.why(run, "send_call_us_p95")),
            ]
        )
    ]
    ww = match.worst_window
    if ww:
        rows.append(
            tr(
                [
                    td(f"mqlab worst {ww['window_s']:g} s window"),
                    td(""),
                    td(""),
                    ms_cell(ww["processing_us_p95"]),
                    ms_cell(ww["send_call_us_p95"]),
                ]
            )
        )
    for x in match.rows:
        rows.append(tr(published_cells(x), cls="published"))
    return table(
        ("source", "send msgs/s", "receive msgs/s", "processing p95 (ms)", "send p95 (ms)"),
        rows,
        sortable=False,
    )


def published_cells(x: reference.ReferenceRow) -> list[str]:
    label = f"{REFERENCE_LABEL}: {x.system}" + (f" ({x.table})" if x.table != "main" else "")
    proc = (
        td(
            "fell behind",
            sort=x.processing_latency_p95_ms,
            title=f"receivers fell behind (published as {x.processing_latency_p95_ms:g} ms)",
            cls="num",
        )
        if x.fell_behind
        else td(f"{x.processing_latency_p95_ms:,.1f}", sort=x.processing_latency_p95_ms, cls="num")
    )
    return [
        td(label, title=x.approximate),
        td(f"{x.send_msgs_per_s:,.0f}", sort=x.send_msgs_per_s, cls="num"),
        td(f"{x.receive_msgs_per_s:,.0f}", sort=x.receive_msgs_per_s, cls="num"),
        proc,
        td(f"{x.send_latency_p95_ms:,.1f}", sort=x.send_latency_p95_ms, cls="num"),
    ]


def _published_cell(x: Any) -> str:
    if x is None:
        return figure(None, why="not published, or not measured by this run")
    if isinstance(x, int | float):
        return td(shown.published_cell(x), sort=x, cls="num")
    return td(str(x))


def _published_section(run: dict[str, Any]) -> str:
    """The published experiment the run's scenario names (``[reference]``), laid out as
    its seed does: the report's blocks, as tables."""
    ref = published.of_run(run["run_dir"])
    if ref is None or ref[0] == REFERENCE:  # mqperf 2021: the page's own section has it
        return ""
    name, experiment = ref
    try:
        dataset = published_sets.get(name)
    except published.ReferenceError as err:
        return f"<h2>Published reference</h2><p class=note>{esc(err)}</p>"
    parts = [
        "<h2>Published reference</h2>",
        f"<p class=source>{esc(name)}, {esc(experiment)}: {esc(dataset.source)}</p>",
    ]
    for block in dataset.blocks([run], experiment):
        rows = [tr(_published_cell(c) for c in row) for row in block.rows]
        parts.append(table(block.headers, rows, sortable=False, caption=block.title))
        parts += [f"<p class=note>{esc(n)}</p>" for n in block.notes]
    return "\n".join(parts)


def _reference_section(match: reference.ReferenceMatch) -> str:
    parts = [
        f"<h2>Against {esc(REFERENCE_LABEL)}</h2>",
        f"<p class=source>{esc(reference.SOURCE)}</p>",
    ]
    if match.rows or match.worst_window:
        parts.append(_reference_rows(match))
    if match.note:
        parts.append(f"<p class=note>{esc(match.note)}</p>")
    if match.other_configs:
        parts.append(
            "<p>Published configurations for this broker: "
            + esc("; ".join(match.other_configs))
            + ' (see <a href="../../compare.html#published">the comparison page</a>)</p>'
        )
    return "\n".join(parts)


def _load_generator(run: dict[str, Any]) -> str:
    """The report's load generator section: the marks and why, the CPU of each node."""
    section = json.loads(run["saturation"]) if run.get("saturation") else None
    paras = []
    for sentence in saturation.explain(section):
        head, sep, rest = sentence.partition(":** ")
        if sentence.startswith("**") and sep:
            paras.append(f"<p><strong>{esc(head[2:])}:</strong> {esc(rest)}</p>")
        else:
            paras.append(f"<p>{esc(sentence)}</p>")
    rows = shown.load_generator_rows(section)
    tbl = ""
    if rows:
        body = [tr(td(c, cls="num" if i > 1 else None) for i, c in enumerate(row)) for row in rows]
        tbl = table(shown.LOAD_HEADER, body, sortable=False) + f"<p>{esc(shown.LOAD_NOTE)}</p>"
    return "<h2>Load generator</h2>" + "".join(paras) + tbl


def _periods(run: dict[str, Any]) -> str:
    origin = run["measure_start_ms"]
    rows = []
    for _, name in ROLES:
        seconds = run[f"{name}_period_s"]
        rows.append(
            tr(
                [
                    td(name),
                    td(shown.secs(run[f"{name}_start_ms"], origin), cls="num"),
                    td(shown.secs(run[f"{name}_end_ms"], origin), cls="num"),
                    td("nothing counted" if seconds is None else f"{seconds:,.3f}", cls="num"),
                    figure(
                        run[f"{name}_msgs_per_s"], ",.0f", unknown.why(run, f"{name}_msgs_per_s")
                    ),
                    figure(run[f"{name}_mb_per_s"], ",.3f", unknown.why(run, f"{name}_mb_per_s")),
                ]
            )
        )
    warm = (run["warmup_end_ms"] - origin) / 1000
    return (
        "<h2>Measured periods</h2>"
        f"<p>Times are seconds since the senders started. The first {warm:g} s are warm-up "
        "and not counted; a role's period runs from its first counted interval to its last "
        "counted event.</p>"
        + table(("role", "from", "to", "seconds", "msgs/s", "MB/s"), rows, sortable=False)
        + f"<p>Max sender lag: {esc(unknown.show(run['sender_lag_ms_max'], ','))} ms.</p>"
    )


def _share(run: dict[str, Any], d: str, share: float | None) -> str:
    """A checker figure's share of the messages sent, as the report words it."""
    if d not in CHECKER:
        return td("")
    if share is None:
        sent = run.get("delivery_sent")
        why = unknown.why(run, f"delivery_{d}") or (
            "nothing sent" if sent == 0 else unknown.why(run, "delivery_sent")
        )
        return figure(None, why=why)
    return td(shown.percent(share), cls="num")


def _delivery(run: dict[str, Any]) -> str:
    reasons = unknown.reasons(run)
    meaning = {**shown.DELIVERY_MEANING, "undrained": UNDRAINED_MEANING}
    shares = tables.fractions(run)
    rows = [
        tr(
            [
                td(d.replace("_", " ")),
                figure(run[f"delivery_{d}"], ",", reasons.get(d)),
                _share(run, d, shares.get(d)),
                td(meaning.get(d, "")),
                td(reasons.get(d) or "", cls="why"),
            ]
        )
        for d in DELIVERY
    ]
    return (
        "<h2>Delivery</h2>"
        + table(
            ("figure", "messages", "share of sent", "meaning", "why unknown"),
            rows,
            table_id="delivery",
            sortable=False,
        )
        + "<p>Share of sent: Jepsen's total-queue figures (lost, unexpected, duplicated, "
        "recovered), each over the messages sent.</p>"
    )


# why a fault's figure is unknown, by the faults table's heading
FAULT_UNKNOWN = {
    "send p99 back": "no level before the fault, or never back",
    "processing p99 back": "no level before the fault, or never back",
}
FAULT_MESSAGES = {"sent in it": "sent", "of them lost": "lost", "recovered": "recovered"}
NO_MARKS = "the senders recorded no per-second seq marks (an archive from before them)"


def _fault_reason(run: dict[str, Any], heading: str) -> str:
    if heading in FAULT_MESSAGES:
        return unknown.reasons(run).get(FAULT_MESSAGES[heading]) or NO_MARKS
    return FAULT_UNKNOWN.get(heading, "not in the summary")


def _faults(r: SiteRun, images: Sequence[str]) -> str:
    """The report's faults table, a row per fault; nothing for a run without faults. When
    the fault figures cannot be read, the faults of the manifest's log with every figure
    unknown."""
    run = r.run
    if run is None or not r.had_faults:
        return ""
    rows = []
    for f in fault_rows(r):
        texts = shown.fault_row(f, run["measure_start_ms"])
        cells = [td(texts[0])]
        for heading, text in zip(shown.FAULT_HEADER[1:], texts[1:], strict=True):
            if text == unknown.UNKNOWN:
                cells.append(figure(None, why=r.faults_unknown or _fault_reason(run, heading)))
            else:
                cells.append(td(text, cls="num"))
        rows.append(tr(cells))
    shaded = " The timeline above shades each fault." if TIMELINE_PNG in images else ""
    note = ""
    if r.faults is None:
        note = (
            "<p class=note><strong>Fault figures unknown:</strong> "
            f"{esc(r.faults_unknown or '')}. The faults are those of the manifest's log.</p>"
        )
    return (
        "<h2>Faults</h2>"
        + note
        + table(shown.FAULT_HEADER, rows, table_id="faults", sortable=False)
        + f"<p>{esc(shown.fault_note(run))}{shaded}</p>"
    )


def _latency(run: dict[str, Any]) -> str:
    reasons = unknown.reasons(run)
    rows = [
        tr(
            [
                td(m, title=shown.METRIC_MEANING.get(m)),
                *(
                    figure(
                        run[f"{m}_{f}"], ",.1f" if f == "mean" else ",.0f", reasons.get(f"{m}_{f}")
                    )
                    for f in FIGURES
                ),
            ]
        )
        for m in METRICS
    ]
    meanings = "".join(
        f"<li><code>{esc(m)}</code>: {esc(shown.METRIC_MEANING[m])}</li>" for m in METRICS
    )
    clamped = []
    for m in METRICS:
        below, above = (run.get(f"{m}_{o}") for o in OUT_OF_RANGE)
        if below or above:
            clamped.append(
                f"<li>{esc(m)}: {below or 0:,} below zero, {above or 0:,} above 1 h</li>"
            )
        for o in OUT_OF_RANGE:
            why = reasons.get(f"{m}_{o}")
            if why:
                clamped.append(
                    f"<li>{esc(m)} {esc(o.replace('_', ' '))}: unknown ({esc(why)})</li>"
                )
    out = (
        "<h2>Latency (measured period, µs)</h2>"
        + table(("metric", *(f.replace("_", ".") for f in FIGURES)), rows, sortable=False)
        + f"<ul>{meanings}</ul>"
    )
    if clamped:
        out += (
            "<p><strong>Latency values out of range</strong>, recorded clamped at 0 or at the "
            "histogram's 1 h maximum, so percentiles near them are bounds:</p>"
            f"<ul>{''.join(clamped)}</ul>"
        )
    return out


def _problems(r: SiteRun) -> str:
    run = r.run or {}
    problems = r.tables.get("problems", [])
    if not (run.get("bad_lines") or run.get("missing_files") or problems):
        return ""
    items = [
        f"<li><code>{esc(shown.problem_where(p, r.path))}</code>: {esc(p['problem'])}</li>"
        for p in problems[: shown.MAX_PROBLEMS_SHOWN]
    ]
    if len(problems) > shown.MAX_PROBLEMS_SHOWN:
        items.append(f"<li>… and {len(problems) - shown.MAX_PROBLEMS_SHOWN} more</li>")
    return (
        "<h2>Input problems</h2>"
        f"<p>{run.get('bad_lines', 0)} bad line(s) and {run.get('missing_files', 0)} missing or "
        "unreadable file(s) were skipped and counted:</p>"
        f"<ul>{''.join(items)}</ul>"
    )


def _plot(name: str, images: Sequence[str], alt: str, missing: str) -> str:
    if name in images:
        return (
            f'<figure><a href="{esc(name)}"><img src="{esc(name)}" alt="{esc(alt)}" '
            f'class="plot"></a></figure>'
        )
    return f"<p class=note>{esc(missing)}</p>"


def _archive(r: SiteRun) -> str:
    try:
        scenario = (r.path / SCENARIO).read_text(encoding="utf-8")
    except OSError as err:
        scenario = f"# {r.path / SCENARIO}: unreadable ({err})"
    manifest = json.dumps(r.listed.info.manifest, indent=1, ensure_ascii=False)
    return (
        "<h2>Scenario</h2>"
        f"<p><code>{esc(SCENARIO)}</code> as run (re-run it with "
        f"<code>mqlab run {esc(r.path / SCENARIO)}</code>):</p>"
        + pre(scenario, cls="scenario")
        + "<h2>Manifest</h2><p><code>manifest.json</code>: versions, host, clock, times, "
        "how the run ended.</p>" + pre(manifest, cls="manifest")
    )


def run_page(r: SiteRun, images: Sequence[str], match: reference.ReferenceMatch | None) -> str:
    parts = [f"<h1>{esc(r.run_id)}</h1>", _facts(r)]
    run = r.run
    if run is None:
        parts.append(
            f"<p class=note><strong>Not summarized:</strong> {esc(r.not_summarized or '')}</p>"
        )
    else:
        parts += ["<h2>mqperf table</h2>", _mqperf_table(run), _load_generator(run)]
        parts.append("<h2>Latency by percentile</h2>")
        parts.append(
            _plot(
                PERCENTILES_PNG,
                images,
                f"latency by percentile of {r.run_id}",
                "No latency values (every histogram is empty).",
            )
        )
        parts.append(
            "<p>The HdrHistogram percentile plot: the x axis is 1/(1−p) on a log scale, so "
            "each tick to the right is one more nine.</p>"
        )
        parts.append("<h2>Timeline (per second)</h2>")
        parts.append(f"<p>{esc(shown.TIMELINE_NOTE)}</p>")
        parts.append(
            _plot(
                TIMELINE_PNG,
                images,
                f"per-second throughput and latency of {r.run_id}",
                "No per-second figures (the timeline table is empty).",
            )
        )
        parts.append(_delivery(run))
        parts.append(_faults(r, images))
        parts.append(_latency(run))
        parts.append(_periods(run))
        parts.append(_clocks(run))
        if match is not None:
            parts.append(_reference_section(match))
        parts.append(_published_section(run))
        parts.append(_problems(r))
    parts.append(_archive(r))
    return page(r.run_id, "\n".join(p for p in parts if p), root="../../")
