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
from mqlab.report.against import REFERENCE, against_section
from mqlab.report.run_report import RunReport, facts, run_sections
from mqlab.report.site.gather import SiteRun
from mqlab.report.site.html import (
    block_html,
    esc,
    page,
    pre,
    section_html,
)


def _facts(r: SiteRun) -> str:
    info = r.listed.info
    return block_html(facts(r.run, info.scenario, info.manifest))


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
            parts.append(section_html(against_section(match, "../../compare.html#published")))
    parts.append(_archive(r))
    return page(r.run_id, "\n".join(p for p in parts if p), root="../../")
