"""What reports and tables show of a run's clocks and cost: report.md's clock section
(several hosts) and cost line (a lab with a price), the `run` and `ls` tables' cost
columns; a local run shows nothing new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mqlab import cli
from mqlab.fleet.clocks import ClockEstimate, clock_section
from mqlab.results.archive import layout
from mqlab.results.archive.formats import write_json
from mqlab.results.report import listing, markdown
from mqlab.results.summary.job import summarize_run

from .archive import START_MS, TinyRun, write_tiny_run
from .conftest import WINDOW_S, Lab


def _priced_multi_host(results: Path, budget_ms: float) -> TinyRun:
    run = write_tiny_run(results, start_ms=START_MS + 3_600_000)
    path = run.run_dir / layout.MANIFEST
    doc = json.loads(path.read_text())
    before = {
        "client-1": ClockEstimate(0.8, 0.11, 0.22, 40),
        "client-2": ClockEstimate(-2.5, 0.07, 0.14, 40),
    }
    after = {
        "client-1": ClockEstimate(0.9, 0.1, 0.2, 40),
        "client-2": ClockEstimate(-2.4, 0.07, 0.14, 40),
    }
    doc["clock"] = clock_section(
        before, after, {"sender-00": "client-1"}, {"receiver-00": "client-2"}, budget_ms
    )
    doc["lab"] = {
        "kind": "aws",
        "name": "eu-3x",
        "price_per_hour_usd": 1.53,
        "hosts": {"client-1": {"role": "client", "address": "10.0.0.1"}},
    }
    doc["cluster"]["target"] = "aws"
    write_json(path, doc)
    summarize_run(run.run_dir, window_s=WINDOW_S)
    return run


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / layout.SUMMARY).read_text())


def test_report_shows_the_clock_bound_offsets_and_the_cost(tmp_path: Path) -> None:
    run = _priced_multi_host(tmp_path / "results", budget_ms=5.0)
    text = markdown.report_run(run.run_dir).read_text()
    summary = _summary(run.run_dir)
    assert "## Clocks" in text
    assert f"Clock error bound: {summary['clock_bound_ms']:g} ms (within the budget 5 ms)" in text
    assert "| client-1 | +0.800 | 0.110 | 0.1 |" in text
    assert "| client-2 | -2.500 | 0.070 | 0.1 |" in text
    assert "Problem" not in text
    cost = summary["cost_usd"]
    assert cost == pytest.approx(1.53 * summary["run_hours"], abs=1e-6)
    line = next(ln for ln in text.splitlines() if ln.startswith("- lab `eu-3x` (aws) at $1.53/h"))
    assert f"cost ${cost:,.4f}" in line and "per million messages delivered" in line
    assert "## Input problems" not in text


def test_report_of_a_run_over_its_clock_budget_says_so(tmp_path: Path) -> None:
    run = _priced_multi_host(tmp_path / "results", budget_ms=0.1)
    text = markdown.report_run(run.run_dir).read_text()
    assert "(over the budget 0.1 ms)" in text
    assert "**Problem:** clock error bound 0.38 ms exceeds the budget 0.1 ms" in text
    assert "## Input problems" not in text  # the clock is not an input problem


def test_a_local_run_shows_no_clock_section_and_no_cost(lab: Lab) -> None:
    text = markdown.report_run(lab.complete.run_dir).read_text()
    assert "## Clocks" not in text and "lab `" not in text and "$" not in text
    summary = _summary(lab.complete.run_dir)
    row = cli.mqperf_row(layout.read_scenario(lab.complete.run_dir), summary, "x", "complete")
    assert row["cost"] == row["cost_per_m"] == ""
    headers = [c.header for c in cli.mqperf_table([row]).columns]
    assert "Cost $" not in headers and headers[-1] == "Status"
    (listed,) = [x for x in listing.list_runs(lab.results) if x.info.run_id == lab.complete.run_id]
    assert listing.cells(listing.row(listed))[-1] == ""


def test_run_and_ls_tables_show_the_cost_of_a_priced_run(tmp_path: Path) -> None:
    run = _priced_multi_host(tmp_path / "results", budget_ms=5.0)
    summary = _summary(run.run_dir)
    row = cli.mqperf_row(layout.read_scenario(run.run_dir), summary, "x", "complete")
    assert row["cost"] == f"{summary['cost_usd']:,.4f}"
    assert row["cost_per_m"] == f"{summary['cost_per_million_delivered_usd']:,.4f}"
    headers = [c.header for c in cli.mqperf_table([row]).columns]
    assert headers[8:10] == ["Lost", "Undrained"] and headers[-3:] == [
        "Cost $",
        "$ / M msgs",
        "Status",
    ]
    (listed,) = listing.list_runs(tmp_path / "results")
    d = listing.row(listed)
    assert d["cost_usd"] == summary["cost_usd"] and d["price_per_hour_usd"] == 1.53
    per_m = summary["cost_per_million_delivered_usd"]
    per_m_text = f"${per_m:,.4f}" if per_m < 1 else f"${per_m:,.2f}"
    assert listing.cells(d)[-1] == f"${summary['cost_usd']:,.4f} ({per_m_text}/M)"
    assert len(listing.cells(d)) == len(listing.COLUMNS)
