"""The site's comparison page: the runs ticked on the index side by side with `mqlab
compare`'s figures (:data:`mqlab.report.compare.FIGURES`), and each run beside the mqperf
2021 rows it matches (:func:`mqlab.published.reference.against_reference`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mqlab.published import reference
from mqlab.report import cells as shown
from mqlab.report import compare, unknown
from mqlab.report.against import REFERENCE, REFERENCE_LABEL, published_row
from mqlab.report.site.gather import SiteRun
from mqlab.report.site.html import (
    cell_html,
    esc,
    figure,
    filter_box,
    page,
    table,
    td,
    tr,
)
from mqlab.report.site.pages import ms_cell, run_link, threads_cell


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
        ("threads", shown.threads_label),
        ("processes", shown.processes_label),
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
        cells = shown.mqperf_row(run)  # threads, processes, nodes, ... (report's)
        rows.append(
            tr(
                [
                    td(f"mqlab: {run_link(r)}", sort=f"mqlab {r.run_id}", raw=True),
                    td(run["broker"]),
                    td(cells[0]),
                    td(cells[1]),
                    td(cells[2], cls="num"),
                    td(cells[3], cls="num"),
                    figure(run["send_msgs_per_s"], ",.0f", unknown.why(run, "send_msgs_per_s")),
                    figure(
                        run["receive_msgs_per_s"], ",.0f", unknown.why(run, "receive_msgs_per_s")
                    ),
                    ms_cell(run["processing_us_p95"], unknown.why(run, "processing_us_p95")),
                    ms_cell(run["send_call_us_p95"], unknown.why(run, "send_call_us_p95")),
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
            label, send, receive, proc, send_p95 = (
                cell_html(c, i > 0) for i, c in enumerate(published_row(x))
            )
            notes = [n for n in (x.approximate,) if n]
            if same:
                notes.append("same threads and nodes as " + ", ".join(same))
            rows.append(
                tr(
                    [
                        label,
                        td(x.broker),
                        td(threads_cell(x.sender_threads, x.receiver_threads)),
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
