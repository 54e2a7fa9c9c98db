"""What reports and tables show of a run's clocks and cost: report.md's clock section
(several hosts) and cost line (a lab with a price), the `run` and `ls` tables' cost
columns; a local run shows nothing new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mqlab import cli
from mqlab.analysis.job import summarize_run
from mqlab.archive import layout
from mqlab.archive.formats import write_json
from mqlab.hosts.clocks import ClockEstimate, clock_section
from mqlab.report import listing, markdown

from .archive import START_MS, TinyRun, write_tiny_run
from .conftest import WINDOW_S, Lab

# the tiny run delivers 793 distinct messages: 2 sender ids x 50 msgs/s x 8 s = 800 sent,
# 4 failed, 2 lost and 1 left in the broker
DELIVERED = 793


def _priced_multi_host(results: Path, budget_ms: float, minutes: int = 40) -> TinyRun:
    """A run on an aws lab at $1.53 an hour that took ``minutes`` (manifest times)."""
    run = write_tiny_run(results, start_ms=START_MS + 3_600_000)
    path = run.run_dir / layout.MANIFEST
    doc = json.loads(path.read_text())
    doc["started_at"] = "2025-11-22T11:00:00.000+00:00"
    doc["ended_at"] = f"2025-11-22T11:{minutes:02d}:00.000+00:00"
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
    assert summary["delivery"]["unique_received"] == DELIVERED
    # 40 min at $1.53/h = $1.02; $1.02 / 793 x 1e6 = $1,286.2547...; $1 and more: cents
    assert summary["cost_usd"] == pytest.approx(1.02, abs=1e-9)
    assert (
        "- lab `eu-3x` (aws) at $1.53/h: cost $1.02 over 40.0 min, $1,286.25 per million "
        "messages delivered"
    ) in text.splitlines()
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
    # 10 min at $1.53/h = $0.255; $0.255 / 793 x 1e6 = $321.5636822...
    run = _priced_multi_host(tmp_path / "results", budget_ms=5.0, minutes=10)
    summary = _summary(run.run_dir)
    row = cli.mqperf_row(layout.read_scenario(run.run_dir), summary, "x", "complete")
    assert (row["cost"], row["cost_per_m"]) == ("0.2550", "321.5637")
    headers = [c.header for c in cli.mqperf_table([row]).columns]
    assert headers[9:11] == ["Lost", "Undrained"] and headers[-3:] == [
        "Cost $",
        "$ / M msgs",
        "Status",
    ]
    (listed,) = listing.list_runs(tmp_path / "results")
    d = listing.row(listed)
    assert d["cost_usd"] == pytest.approx(0.255, abs=1e-9) and d["price_per_hour_usd"] == 1.53
    # below $1 to 1/100 cent, from $1 on to the cent
    assert listing.cells(d)[-1] == "$0.2550 ($321.56/M)"
    assert len(listing.cells(d)) == len(listing.COLUMNS)
