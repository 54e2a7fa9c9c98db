"""report.md, its plots and the sweep report, from the summary of real (tiny) archives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image

from mqlab.analysis import catalog
from mqlab.analysis.job import summarize_run
from mqlab.analysis.schema import DELIVERY
from mqlab.archive import layout, records
from mqlab.archive.layout import METRICS
from mqlab.report import cells, markdown, sweep

from .archive import BELOW_ZERO, LAG_MS, START_MS, write_tiny_run
from .conftest import WINDOW_S, Lab

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def cell(text: str, figure: str) -> str:
    """The value of a row of the delivery table."""
    m = re.search(rf"^\| {figure} \| ([^|]+) \|", text, re.MULTILINE)
    assert m, f"no delivery row {figure!r}"
    return m.group(1).strip()


def report_of(run_dir: Path) -> str:
    return markdown.report_run(run_dir).read_text()


def test_report_shows_the_archives_figures(lab: Lab) -> None:
    run = lab.complete
    text = report_of(run.run_dir)
    assert "| 2 | 1 | 1 | 2 | 100 | 80 |" in text  # mqperf row: threads, processes, nodes, msgs/s
    assert cell(text, "confirmed") == f"{run.confirmed:,}"
    assert cell(text, "failed") == str(run.failed)
    assert cell(text, "received") == f"{run.received:,}"
    assert cell(text, "lost") == str(run.lost)
    assert cell(text, "duplicated") == str(run.duplicated)
    assert "| undrained |" not in text  # shown apart from lost
    assert f"**Undrained:** {run.undrained} message(s) were still in the broker" in text
    assert "not counted as lost" in text
    assert "unknown" not in text.lower()
    assert f"- processing_us: {BELOW_ZERO} below zero, 0 above 1 h" in text
    assert "send_call_us: 0 below zero" not in text  # only non-zero counts
    assert f"Max sender lag: {max(LAG_MS.values())} ms" in text
    assert re.search(r"^\| send \| \+\d+\.\d{3} s \| \+\d+\.\d{3} s \|", text, re.MULTILINE)
    assert re.search(r"^\| receive \| \+\d+\.\d{3} s \|", text, re.MULTILINE)
    for m in METRICS:
        assert re.search(rf"^\| {m} \| [1-9]", text, re.MULTILINE), m  # every metric counted
    assert "| send_failed_us | 4 |" in text
    assert "![timeline](timeline.png)" in text
    assert "queueing time" in text
    assert "![percentiles](latency_percentiles.png)" in text
    assert "## Input problems" not in text


def test_processing_p95_in_the_report_is_the_summarys(lab: Lab) -> None:
    run = catalog.read_run_table(lab.complete.run_dir, "runs").to_pylist()[0]
    text = report_of(lab.complete.run_dir)
    assert f"| {run['processing_us_p95'] / 1000:,.1f} ms |" in text
    # and the summary's p95 is that of the latencies that went into the archive
    values = sorted(lab.complete.processing_us)
    assert values[0] <= run["processing_us_p95"] <= values[-1]


@pytest.mark.parametrize("name", [markdown.TIMELINE_PNG, markdown.PERCENTILES_PNG])
def test_plots_are_valid_pngs(lab: Lab, name: str) -> None:
    report_of(lab.complete.run_dir)
    path = lab.complete.run_dir / name
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        assert img.width >= 800 and img.height >= 400
        assert img.info.get("Software") == "mqlab"
        # not blank: a plot has many colours
        assert len(img.convert("RGB").getcolors(maxcolors=1_000_000) or ()) > 50


def test_missing_delivery_json_shows_unknown_with_the_reason(lab: Lab) -> None:
    text = report_of(lab.no_delivery.run_dir)
    for figure in ("received", "first received", "unique received", "lost", "duplicated"):
        assert cell(text, figure) == "unknown", figure
    assert cell(text, "confirmed") == f"{lab.no_delivery.confirmed:,}"  # still known
    why = "delivery.json of receiver-01 missing or unreadable"
    reasons = text.split("**Unknown figures**", 1)[1].split("##", 1)[0]
    assert re.search(rf"^- [a-z_, ]*\blost\b[a-z_, ]*: {why}$", reasons, re.MULTILINE)
    assert re.search(rf"^- [a-z_, ]*\breceived\b[a-z_, ]*: {why}$", reasons, re.MULTILINE)
    assert "status `partial`" in text
    assert "## Input problems" in text
    assert "- `workers/receiver-01/delivery.json`: " in text  # relative to the run


def test_unidentified_undrained_messages_make_lost_unknown(tmp_path: Path) -> None:
    run = write_tiny_run(
        tmp_path,
        undrained=records.UndrainedRecord(checked_ms=START_MS + 20_000, count=1),
    )
    summarize_run(run.run_dir, window_s=WINDOW_S)
    text = report_of(run.run_dir)
    assert cell(text, "lost") == "unknown"
    assert "**Undrained:** 1 message(s)" in text
    assert "could not be identified" in text
    assert "lost is between 0 and 3" in text  # 2 lost + 1 left in the broker


def test_a_failed_undrained_check_and_missing_worker_json(tmp_path: Path) -> None:
    run = write_tiny_run(
        tmp_path,
        undrained=records.UndrainedRecord(
            checked_ms=START_MS + 20_000, count=None, error="connection refused"
        ),
        omit=("workers/receiver-00/worker.json",),
    )
    summarize_run(run.run_dir, window_s=WINDOW_S)
    text = report_of(run.run_dir)
    assert "**Undrained:** unknown" in text
    assert cell(text, "lost") == "unknown"
    assert re.search(r"^- [a-z_, ]*undrained[a-z_, ]*: .*connection refused", text, re.MULTILINE)
    assert "Out-of-range counts unknown" in text
    assert re.search(r"processing_us_below_zero.*: worker\.json missing", text)


def test_delivery_meanings_cover_every_figure() -> None:
    assert set(cells.DELIVERY_MEANING) | {"undrained"} == set(DELIVERY)
    assert set(cells.METRIC_MEANING) == set(METRICS)


def test_empty_timeline_writes_no_timeline_png(lab: Lab, tmp_path: Path) -> None:
    run = catalog.read_run_table(lab.complete.run_dir, "runs").to_pylist()[0]
    text = markdown.run_markdown(run, [], [], [], {}, tmp_path)
    assert "timeline.png" not in text
    assert "timeline table is empty" in text


def test_sweep_report(lab: Lab, tmp_path: Path) -> None:
    out = sweep.report_sweep([lab.complete.run_dir, lab.no_delivery.run_dir], tmp_path)
    text = out.read_text()
    assert lab.complete.run_id in text and lab.no_delivery.run_id in text
    row = next(ln for ln in text.splitlines() if lab.no_delivery.run_id in ln)
    assert "| unknown |" in row  # lost
    for png in ("sweep_throughput.png", "sweep_p95.png"):
        assert (tmp_path / png).read_bytes()[:8] == PNG_SIGNATURE


def test_report_of_an_unsummarized_run_says_how_to_summarize(tmp_path: Path) -> None:
    run = write_tiny_run(tmp_path)
    with pytest.raises(Exception, match="mqlab summarize"):
        markdown.report_run(run.run_dir)
    assert not (run.run_dir / layout.SUMMARY).exists()
