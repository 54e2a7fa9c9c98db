"""A run's page of the site: its facts, the report's sections as ``report.md`` has them
(the one model of :mod:`mqlab.report.run_report`, rendered by
:func:`~mqlab.report.site.html.section_html`), its match against mqperf 2021, and its
archived scenario and manifest."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mqlab.archive.layout import SCENARIO
from mqlab.published import reference
from mqlab.report import unknown
from mqlab.report.run_report import RunReport, facts, run_sections
from mqlab.report.site.gather import SiteRun
from mqlab.report.site.html import (
    block_html,
    esc,
    figure,
    page,
    pre,
    section_html,
    table,
    td,
    tr,
)
from mqlab.report.site.pages import REFERENCE, REFERENCE_LABEL, ms_cell


def _facts(r: SiteRun) -> str:
    info = r.listed.info
    return block_html(facts(r.run, info.scenario, info.manifest))


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


def report(
    r: SiteRun, run: dict[str, Any], images: Sequence[str], match: bool = False
) -> RunReport:
    """What the run's report is built from (its ``runs`` row ``run``), as the site read
    it; with a ``match`` against mqperf 2021 the page shows that set in its own section."""
    return RunReport(
        run,
        r.path,
        r.tables.get("windows", []),
        images,
        r.tables.get("problems", []),
        r.faults,
        r.faults_unknown,
        r.fault_log,
        shown_apart=REFERENCE if match else None,
    )


def run_page(r: SiteRun, images: Sequence[str], match: reference.ReferenceMatch | None) -> str:
    """The run's facts, the report's sections (:func:`run_report.run_sections`, as
    ``report.md`` has them), its match against mqperf 2021, and its archived scenario and
    manifest."""
    parts = [f"<h1>{esc(r.run_id)}</h1>", _facts(r)]
    run = r.run
    if run is None:
        parts.append(
            f"<p class=note><strong>Not summarized:</strong> {esc(r.not_summarized or '')}</p>"
        )
    else:
        parts += [section_html(s) for s in run_sections(report(r, run, images, match is not None))]
        if match is not None:
            parts.append(_reference_section(match))
    parts.append(_archive(r))
    return page(r.run_id, "\n".join(p for p in parts if p), root="../../")
