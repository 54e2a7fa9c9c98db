"""The site's pages: the index of runs, a page per run, the comparison page.

Figures come from the code of the other commands, never computed here: the index's
columns are `mqlab ls`'s (:func:`listing.row` and :func:`listing.cells`, over each run's
``summary.json``) plus the summary's processing p95/p99 and duplicated; a run page shows
the run's ``runs`` row as `mqlab report` does (:func:`markdown.mqperf_row`, the report's
meanings and notes), and its faults as the report's faults table
(:func:`markdown.fault_row`); the index's durability matrix has the sweep report's cells
(:func:`markdown.matrix_cells`); the comparison page shows `mqlab compare`'s figures
(:data:`compare.FIGURES`) and its reference matching (:func:`reference.against_reference`).
A figure the summary could not compute is "unknown" with the summary's reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mqlab.analysis import faults as fault_figures
from mqlab.analysis import saturation, tables
from mqlab.analysis.figures import FIGURES
from mqlab.analysis.tables import DELIVERY, OUT_OF_RANGE, ROLES
from mqlab.archive.layout import METRICS, SCENARIO
from mqlab.published import base as published
from mqlab.published import reference
from mqlab.published import sets as published_sets
from mqlab.report import compare, listing, markdown, unknown
from mqlab.report.plots import PERCENTILES_PNG, TIMELINE_PNG
from mqlab.report.site.gather import SiteRun
from mqlab.report.site.html import (
    NOT_SUMMARIZED,
    breakable,
    esc,
    figure,
    filter_box,
    not_summarized,
    page,
    pre,
    table,
    td,
    tr,
)

REFERENCE = "mqperf-2021"
REFERENCE_LABEL = "mqperf 2021 (published)"
UNDRAINED_MEANING = "still in the broker when the receivers stopped (never counted as lost)"
MAX_PROBLEMS_SHOWN = markdown.MAX_PROBLEMS_SHOWN


# the summary's figures that the index shows as columns, in its order
INDEX_FIGURES = ("send_msgs_per_s", "receive_msgs_per_s", "lost", "duplicated", "undrained")


# -- shared ---------------------------------------------------------------------------
def _ms(us: float | int | None, why: str | None = None) -> str:
    """A latency in µs as a cell in ms, as the report formats it."""
    return figure(us, ",.1f", why, scale=1 / 1000)


def _summary_reasons(r: SiteRun) -> dict[str, str]:
    return unknown.reasons(r.summary or {})


def _summary_figure(r: SiteRun, *keys: str) -> Any:
    doc: Any = r.summary or {}
    for k in keys:
        doc = doc.get(k) if isinstance(doc, dict) else None
    return doc


def flags(r: SiteRun) -> list[tuple[str, str | None]]:
    """(text, detail) of what a reader of the run's figures should know about: unknown
    figures with the summary's reason, input problems, sender lag, latencies out of
    range, a clock error bound over its budget, failed sends."""
    s = r.summary
    if s is None:
        return [("not summarized", f"run `mqlab summarize {r.path}`")]
    out: list[tuple[str, str | None]] = []
    by_reason: dict[str, list[str]] = {}
    for fig, why in unknown.reasons(s).items():
        by_reason.setdefault(why, []).append(fig)
    for why, figs in by_reason.items():
        # the index's own columns by name, the others counted (all of them on hover)
        named = [f for f in INDEX_FIGURES if f in figs] or figs[:1]
        more = len(figs) - len(named)
        text = ", ".join(named) + (f" and {more} more" if more else "")
        out.append((f"{text} unknown: {why}", "unknown: " + ", ".join(figs)))
    problems = s.get("problems") or {}
    bad, missing = problems.get("bad_lines") or 0, problems.get("missing_files") or 0
    if bad or missing:
        out.append((f"input problems: {bad:,} bad line(s), {missing:,} missing file(s)", None))
    lag = s.get("sender_lag_ms_max")
    if lag:
        out.append(
            (
                f"senders fell {lag:,} ms behind",
                "latencies count from the intended send time (no coordinated omission)",
            )
        )
    oor = s.get("latency_out_of_range") or {}
    clamped = sum(v or 0 for m in oor.values() if isinstance(m, dict) for v in m.values())
    if clamped:
        out.append(
            (f"{clamped:,} latency value(s) out of range", "clamped at 0 or 1 h: see the run")
        )
    if s.get("clock_within_budget") is False:
        out.append((f"clock error bound {s.get('clock_bound_ms')} ms over budget", None))
    failed = (s.get("delivery") or {}).get("failed")
    if failed:
        out.append((f"{failed:,} failed send(s)", None))
    if s.get("stand_in"):
        out.append(("stand-in", f"{s['stand_in']} served, not the real system"))
    sat = s.get("saturation") or {}
    if sat.get("client_bound"):
        out.append(("client-bound", "; ".join(sat.get("client_bound_why") or [])))
    if sat.get("receivers_behind"):
        out.append(("receivers behind", sat.get("receivers_behind_why")))
    return out


def _flags_cell(r: SiteRun) -> str:
    fl = flags(r)
    spans = []
    for text, detail in fl:
        title = f' title="{esc(detail)}"' if detail else ""
        spans.append(f'<span class="flag"{title}>{esc(text)}</span>')
    return td(" ".join(spans), sort=len(fl), raw=True, cls="flags")


def _run_link(r: SiteRun, root: str = "") -> str:
    return f'<a href="{esc(root + r.href)}">{breakable(r.run_id)}</a>'


def _fault_rows(r: SiteRun) -> list[dict[str, Any]]:
    """The run's ``faults`` rows; when they are unknown, the faults of its manifest's log
    (paired into windows as the summary pairs them), without figures."""
    return r.faults if r.faults is not None else fault_figures.windows(r.fault_log)


def _threads(st: int, rt: int) -> str:
    return markdown.threads_label({"sender_threads": st, "receiver_threads": rt})


# -- index ----------------------------------------------------------------------------
INDEX_COLUMNS: tuple[str | tuple[str, str], ...] = (
    ("Pick", ' class="nosort"'),
    "Run",
    "Broker",
    "Profile",
    "Scenario",
    "Status",
    "Send msgs/s",
    "Receive msgs/s",
    "p95 (ms)",
    "p99 (ms)",
    "Lost",
    "Duplicated",
    "Undrained",
)


def _index_row(r: SiteRun, priced: bool) -> str:
    d = r.ls
    c = listing.cells(d)  # exactly `mqlab ls`'s cells: run, broker, scenario, status, ...
    run, broker, scenario, status, send, receive, lost, undrained, cost = c
    summarized = d["summarized"]
    why_not = f"not summarized: run `mqlab summarize {r.path}`"
    reasons = _summary_reasons(r)
    profile = str(r.listed.info.scenario.get("profile", "?"))

    def ls_fig(text: str, value: Any, fig: str) -> str:
        if not summarized:
            return not_summarized(why_not)
        if value is None:
            return figure(None, why=d["unknown"].get(fig) or reasons.get(fig))
        return td(text, sort=value, cls="num")

    def latency(p: str) -> str:
        if not summarized:
            return not_summarized(why_not)
        us = _summary_figure(r, "latency_us", "processing_us", p)
        return _ms(us, reasons.get(f"processing_us_{p}"))

    box = (
        f'<input type="checkbox" class="pick"{" " if r.run else " disabled "}'
        f'value="{esc(r.run_id)}" aria-label="compare {esc(r.run_id)}">'
    )
    cells = [
        td(box, raw=True),
        td(_run_link(r), sort=run, raw=True, cls="run"),
        td(broker),
        td(profile),
        td(scenario),
        td(status, cls=f"status status-{status}" if status.isalpha() else "status"),
        ls_fig(send, d["send_msgs_per_s"], "send_msgs_per_s"),
        ls_fig(receive, d["receive_msgs_per_s"], "receive_msgs_per_s"),
        latency("p95"),
        latency("p99"),
        ls_fig(lost, d["lost"], "lost"),
        (
            not_summarized(why_not)
            if not summarized
            else figure(_summary_figure(r, "delivery", "duplicated"), why=reasons.get("duplicated"))
        ),
        ls_fig(undrained, d["undrained"], "undrained"),
    ]
    if priced:
        cells.append(td(cost, cls="num"))
    cells.append(_flags_cell(r))
    return tr(cells, data_run=r.run_id)


def index_page(runs: Sequence[SiteRun], results_dir: str, warnings: Sequence[str]) -> str:
    priced = any(r.ls.get("price_per_hour_usd") is not None for r in runs)
    header = [*INDEX_COLUMNS, *(("Cost",) if priced else ()), "Flags"]
    left_out = ""
    if warnings:
        items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
        left_out = (
            f'<details class="warnings"><summary>{len(warnings)} run archive(s) could not be '
            f"read and are left out</summary><ul>{items}</ul></details>"
        )
    body = f"""<h1>Runs</h1>
<p>{len(runs)} run(s) from <code>{esc(results_dir)}</code>, oldest first; click a column
heading to sort, type in the box to filter. Figures are those of <code>mqlab ls</code>
and the run's summary: <em>unknown</em> where the summary could not compute a figure
(the reason is in the flags and on hover), <em>{NOT_SUMMARIZED}</em> where the run is not
summarized. p95 and p99 are of the processing latency (from each message's intended send
time to its receipt) over the measured period.</p>
{left_out}
{filter_box("runs", "e.g. nats complete", "runs")}
<p><button type="button" id="compare-picked" disabled>Compare the runs ticked</button>
<a href="compare.html">compare all runs, and with mqperf 2021</a></p>
<div class="wide">{table(header, [_index_row(r, priced) for r in runs], table_id="runs")}</div>
{_durability(runs)}"""
    return page("Runs", body, current="Runs")


def _durability(runs: Sequence[SiteRun]) -> str:
    """The sweep report's durability matrix over the summarized runs that had faults: a
    row per run, a column per kind of fault; nothing when none had one."""
    faulted = [r for r in runs if r.run is not None and r.had_faults]
    columns = markdown.matrix_columns([(r.run, _fault_rows(r)) for r in faulted])
    if not columns:
        return ""
    rows = []
    for r in faulted:
        run = r.run
        assert run is not None
        cells = [
            td(_run_link(r), sort=r.run_id, raw=True, cls="run"),
            td(run["broker"]),
            td(run["profile"]),
        ]
        for text in markdown.matrix_cells(r.faults, columns):
            if r.faults is None:
                cells.append(figure(None, why=r.faults_unknown))
            elif text == "–":
                cells.append(td(text, title="no fault of this kind in this run"))
            else:
                cells.append(td(text, cls="fault"))
        rows.append(tr(cells, data_run=r.run_id))
    return f"""<h2 id="durability-matrix">Durability matrix</h2>
<p>The runs above that injected faults (runs without faults are not listed), a column per
kind of fault. {markdown.MATRIX_NOTE} (several faults of a kind are separated by /). A
run's page has every figure of every fault.</p>
<div class="wide">{table(("run", "broker", "profile", *columns), rows, table_id="durability")}</div>
"""


# -- a run's page -----------------------------------------------------------------------
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
        schedule = markdown._schedule(sc)
        items += [
            (
                "messages",
                f"{run['message_bytes']} bytes, batch {run['batch']}"
                + (f", {schedule}" if schedule else ""),
            ),
            (
                "clients",
                markdown.clients_shape(run),
            ),
            ("cluster", run.get("cluster_target")),
        ]
        items += [
            ("cost", line.removeprefix("- ").replace("`", "")) for line in markdown._cost(run)
        ]
    if sc.get("description"):
        items.append(("description", sc["description"]))
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items if v is not None)
    return f'<dl class="facts">{dl}</dl>'


def _clocks(run: dict[str, Any]) -> str:
    """The report's clock section (runs on several hosts, or with a bound unknown or over
    budget) as HTML: its paragraphs and its table of host offsets, in order."""
    lines = markdown._clocks(run)
    if not lines:
        return ""
    blocks: list[str] = []
    rows: list[list[str]] = []

    def flush() -> None:
        if rows:
            blocks.append(table(rows[0], [tr(td(c) for c in r) for r in rows[1:]], sortable=False))
            rows.clear()

    for line in lines[1:]:  # the first is the heading
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):  # not the alignment row
                rows.append(cells)
            continue
        flush()
        if line.strip():
            blocks.append(f"<p>{esc(line.replace('**', ''))}</p>")
    flush()
    return "<h2>Clocks</h2>" + "".join(blocks)


def _mqperf_table(run: dict[str, Any]) -> str:
    cells = markdown.mqperf_row(run)  # the report's row: same figures, same format
    return table(markdown.MQPERF_HEADER, [tr(td(c) for c in cells)], sortable=False)


def _reference_rows(match: reference.ReferenceMatch) -> str:
    run = match.run
    rows = [
        tr(
            [
                td("mqlab (measured period)"),
                figure(run["send_msgs_per_s"], ",.0f", unknown.why(run, "send_msgs_per_s")),
                figure(run["receive_msgs_per_s"], ",.0f", unknown.why(run, "receive_msgs_per_s")),
                _ms(run["processing_us_p95"], unknown.why(run, "processing_us_p95")),
                _ms(run["send_call_us_p95"], unknown.why(run, "send_call_us_p95")),
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
                    _ms(ww["processing_us_p95"]),
                    _ms(ww["send_call_us_p95"]),
                ]
            )
        )
    for x in match.rows:
        rows.append(tr(_published_cells(x), cls="published"))
    return table(
        ("source", "send msgs/s", "receive msgs/s", "processing p95 (ms)", "send p95 (ms)"),
        rows,
        sortable=False,
    )


def _published_cells(x: reference.ReferenceRow) -> list[str]:
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
        return td(markdown.published_cell(x), sort=x, cls="num")
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
    rows = markdown.load_generator_rows(section)
    tbl = ""
    if rows:
        body = [tr(td(c, cls="num" if i > 1 else None) for i, c in enumerate(row)) for row in rows]
        tbl = (
            table(markdown.LOAD_HEADER, body, sortable=False) + f"<p>{esc(markdown.LOAD_NOTE)}</p>"
        )
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
                    td(markdown._secs(run[f"{name}_start_ms"], origin), cls="num"),
                    td(markdown._secs(run[f"{name}_end_ms"], origin), cls="num"),
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
    if d not in tables.CHECKER:
        return td("")
    if share is None:
        sent = run.get("delivery_sent")
        why = unknown.why(run, f"delivery_{d}") or (
            "nothing sent" if sent == 0 else unknown.why(run, "delivery_sent")
        )
        return figure(None, why=why)
    return td(markdown._percent(share), cls="num")


def _delivery(run: dict[str, Any]) -> str:
    reasons = unknown.reasons(run)
    meaning = {**markdown.DELIVERY_MEANING, "undrained": UNDRAINED_MEANING}
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
    for f in _fault_rows(r):
        texts = markdown.fault_row(f, run["measure_start_ms"])
        cells = [td(texts[0])]
        for heading, text in zip(markdown.FAULT_HEADER[1:], texts[1:], strict=True):
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
        + table(markdown.FAULT_HEADER, rows, table_id="faults", sortable=False)
        + f"<p>{esc(markdown.fault_note(run))}{shaded}</p>"
    )


def _latency(run: dict[str, Any]) -> str:
    reasons = unknown.reasons(run)
    rows = [
        tr(
            [
                td(m, title=markdown.METRIC_MEANING.get(m)),
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
        f"<li><code>{esc(m)}</code>: {esc(markdown.METRIC_MEANING[m])}</li>" for m in METRICS
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
        f"<li><code>{esc(markdown.problem_where(p, r.path))}</code>: {esc(p['problem'])}</li>"
        for p in problems[:MAX_PROBLEMS_SHOWN]
    ]
    if len(problems) > MAX_PROBLEMS_SHOWN:
        items.append(f"<li>… and {len(problems) - MAX_PROBLEMS_SHOWN} more</li>")
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
        parts.append(f"<p>{esc(markdown.TIMELINE_NOTE)}</p>")
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


# -- comparison -----------------------------------------------------------------------
def _compare_value(run: dict[str, Any], field: str) -> str:
    v = run.get(field)
    if v is None:
        return figure(None, why=unknown.why(run, field))
    spec = ",.0f" if field.endswith("msgs_per_s") else ",.1f" if isinstance(v, float) else ","
    return figure(v, spec)


def _side_by_side(runs: Sequence[SiteRun]) -> str:
    summarized = [r for r in runs if r.run is not None]
    picks = "".join(
        f'<li><label><input type="checkbox" class="show-run" checked '
        f'value="{esc(r.run_id)}" data-col="{i}"> {esc(r.run_id)}</label></li>'
        for i, r in enumerate(summarized)
    )
    head = [("figure", ' class="nosort"')] + [
        (r.run_id, f' data-col="{i}" class="nosort"') for i, r in enumerate(summarized)
    ]
    # header rows name the configuration; then `mqlab compare`'s figures
    config: list[tuple[str, Any]] = [
        ("broker", lambda run: run["broker"]),
        ("profile", lambda run: run["profile"]),
        ("scenario", lambda run: run["scenario"]),
        ("status", lambda run: run["status"]),
        ("threads", markdown.threads_label),
        ("processes", markdown.processes_label),
        ("nodes", lambda run: f"{run['sender_nodes']}s-{run['receiver_nodes']}r"),
        ("message bytes", lambda run: run["message_bytes"]),
    ]
    rows = []
    for label, get in config:
        rows.append(
            tr(
                [td(label, cls="label")]
                + [td(str(get(r.run)), data_col=i) for i, r in enumerate(summarized) if r.run]
            )
        )
    for field, label, higher in compare.FIGURES:
        rows.append(
            tr(
                [td(label, cls="label", title="higher is better" if higher else "lower is better")]
                + [
                    _compare_value(r.run, field).replace("<td", f'<td data-col="{i}"', 1)
                    for i, r in enumerate(summarized)
                    if r.run
                ]
            )
        )
    left_out = [r for r in runs if r.run is None]
    note = (
        "<p class=note>Not summarized, so not here: "
        + ", ".join(esc(r.run_id) for r in left_out)
        + "</p>"
        if left_out
        else ""
    )
    return f"""<h2 id="side-by-side">Runs side by side</h2>
<p>The figures of <code>mqlab compare</code> for every summarized run; untick a run to hide
its column (<a href="index.html">the index</a> can tick the runs to show).
<button type="button" id="show-all">show all</button>
<button type="button" id="show-none">hide all</button></p>
<ul class="picks" id="picks">{picks}</ul>
{note}
<div class="wide">{table(head, rows, table_id="side", sortable=False, cls="side")}</div>
"""


def _reference_table(runs: Sequence[SiteRun], matches: dict[str, reference.ReferenceMatch]) -> str:
    rows_ref = reference.load_reference(REFERENCE)
    summarized = [r for r in runs if r.run is not None]
    brokers = sorted({str(r.run["broker"]) for r in summarized if r.run})
    rows = []
    for r in summarized:
        run = r.run
        assert run is not None
        cells = markdown.mqperf_row(run)  # threads, processes, nodes, ... (report's)
        rows.append(
            tr(
                [
                    td(f"mqlab: {_run_link(r)}", sort=f"mqlab {r.run_id}", raw=True),
                    td(run["broker"]),
                    td(cells[0]),
                    td(cells[1]),
                    td(cells[2], cls="num"),
                    td(cells[3], cls="num"),
                    figure(run["send_msgs_per_s"], ",.0f", unknown.why(run, "send_msgs_per_s")),
                    figure(
                        run["receive_msgs_per_s"], ",.0f", unknown.why(run, "receive_msgs_per_s")
                    ),
                    _ms(run["processing_us_p95"], unknown.why(run, "processing_us_p95")),
                    _ms(run["send_call_us_p95"], unknown.why(run, "send_call_us_p95")),
                    td(matches[r.run_id].note or "" if r.run_id in matches else ""),
                ],
                cls="local",
                data_run=r.run_id,
                data_broker=run["broker"],
            )
        )
    for broker in brokers:
        for x in reference.broker_rows(broker, rows_ref):
            same = [
                r.run_id for r in summarized if r.run_id in matches and x in matches[r.run_id].rows
            ]
            label, send, receive, proc, send_p95 = _published_cells(x)
            notes = [n for n in (x.approximate,) if n]
            if same:
                notes.append("same threads and nodes as " + ", ".join(same))
            rows.append(
                tr(
                    [
                        label,
                        td(x.broker),
                        td(_threads(x.sender_threads, x.receiver_threads)),
                        td("1"),  # mqperf: one client process per node, with its threads
                        td(str(x.sender_nodes), cls="num"),
                        td(str(x.receiver_nodes), cls="num"),
                        send,
                        receive,
                        proc,
                        send_p95,
                        td("; ".join(notes)),
                    ],
                    cls="published match" if same else "published",
                    data_broker=x.broker,
                )
            )
    header = (
        "source",
        "broker",
        "threads",
        "processes",
        "sender nodes",
        "receiver nodes",
        "send msgs/s",
        "receive msgs/s",
        "processing p95 (ms)",
        "send p95 (ms)",
        "note",
    )
    no_ref = [b for b in brokers if not reference.broker_rows(b, rows_ref)]
    missing = (
        f"<p class=note>{esc(REFERENCE)} has no rows for: {esc(', '.join(no_ref))}.</p>"
        if no_ref
        else ""
    )
    return f"""<h2 id="published">Local runs and {esc(REFERENCE_LABEL)}</h2>
<p>Each local run in the mqperf table's format next to the figures mqperf published for
the same broker (rows marked <em>published</em>; highlighted where the threads and nodes
match a local run). Source: {esc(reference.SOURCE)}. Local latencies are p95 over the
measured period; a run page also shows the worst {esc("window")}'s p95, mqperf's metric.</p>
{missing}
{filter_box("reference", "e.g. nats", "rows")}
<div class="wide">{table(header, rows, table_id="reference")}</div>
"""


def compare_page(runs: Sequence[SiteRun], matches: dict[str, reference.ReferenceMatch]) -> str:
    body = "<h1>Compare</h1>\n" + _side_by_side(runs) + _reference_table(runs, matches)
    return page("Compare", body, current="Compare")
