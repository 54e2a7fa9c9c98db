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

from mqlab.analysis import catalog
from mqlab.archive.layout import read_scenario
from mqlab.errors import ArchiveError
from mqlab.report import distribution, plots
from mqlab.report.model import block_markdown, section_markdown
from mqlab.report.run_report import RunReport, facts, run_sections

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 2
TIMELINE_PNG = plots.TIMELINE_PNG
PERCENTILES_PNG = plots.PERCENTILES_PNG
DISTRIBUTION_TXT = distribution.DISTRIBUTION_TXT


def _header(run: dict[str, Any], scenario: dict[str, Any]) -> list[str]:
    return [
        f"# {run['run_id']}",
        "",
        f"<!-- mqlab report, format_version {FORMAT_VERSION} -->",
        "",
        *block_markdown(facts(run, scenario, {})),
        "",
    ]


def run_markdown(
    run: dict[str, Any],
    windows: Sequence[dict[str, Any]],
    images: Sequence[str],
    problems: Sequence[dict[str, Any]] | None = None,
    scenario: dict[str, Any] | None = None,
    run_dir: Path | None = None,
    faults: Sequence[dict[str, Any]] | None = (),
    faults_unknown: str | None = None,
    fault_log: Sequence[dict[str, Any]] = (),
) -> str:
    """The report of one ``runs`` row (with its windows, problems, faults and written
    images): its header, then the report's sections (:func:`run_report.run_sections`)
    as Markdown."""
    report = RunReport(
        run,
        run_dir or Path(run["run_dir"]),
        windows,
        images,
        problems or [],
        faults,
        faults_unknown,
        fault_log,
    )
    lines = _header(run, scenario or {})
    for section in run_sections(report):
        lines += [*section_markdown(section), ""]
    return "\n".join(lines[:-1]) + "\n"


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
        faults_unknown = None
    except ArchiveError as err:
        LOG.warning("%s", err)
        fault_rows, faults_unknown = None, str(err)
    out.write_text(
        run_markdown(
            run, windows, images, problems, scenario, run_dir, fault_rows, faults_unknown, faults
        )
    )
    return out
