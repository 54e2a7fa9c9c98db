"""report.md's text for known figures: a summarized tiny run's ``runs`` row with its
figures replaced by round values, rendered by ``markdown.run_markdown``, and each line
compared with the line written out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mqlab.analysis import catalog
from mqlab.report import cells, markdown

from .conftest import Lab

ORIGIN = 1_763_806_925_000  # the senders' start (ms since the epoch)
LATENCY = {  # processing_us: count, mean, p50 ... p99.9999, max
    "count": 1000,
    "mean": 1234.56,
    "p50": 1000,
    "p75": 2000,
    "p90": 3000,
    "p95": 4000,
    "p99": 5000,
    "p99_9": 6000,
    "p99_99": 7000,
    "p99_9999": 8000,
    "max": 3_600_000_000,
}


@pytest.fixture
def row(lab: Lab) -> dict[str, Any]:
    run: dict[str, Any] = catalog.read_run_table(lab.complete.run_dir, "runs").to_pylist()[0]
    run.update(
        sender_threads=4,
        receiver_threads=8,
        sender_nodes=2,
        receiver_nodes=4,
        sender_processes=3,
        receiver_processes=1,
        send_msgs_per_s=12345.4,
        receive_msgs_per_s=999.6,
        send_mb_per_s=0.0123456,
        receive_mb_per_s=0.0,
        processing_us_p95=1_234_567,
        send_call_us_p95=None,
        measure_start_ms=ORIGIN,
        warmup_end_ms=ORIGIN + 2_500,
        send_start_ms=ORIGIN + 3_000,
        send_end_ms=ORIGIN + 10_250,
        send_period_s=7.25,
        receive_start_ms=None,
        receive_end_ms=None,
        receive_period_s=None,
        sender_lag_ms_max=1500,
        window_s=60.0,
        delivery_confirmed=1_234_567,
        delivery_lost=0,
        delivery_undrained=12,
        processing_us_below_zero=3,
        processing_us_above_max=None,
        unknown=json.dumps({"processing_us_above_max": "worker.json of receiver-01 missing"}),
        **{f"processing_us_{k}": v for k, v in LATENCY.items() if k != "p95"},
    )
    return run


def lines_of(run: dict[str, Any], **kw: Any) -> list[str]:
    args: dict[str, Any] = {"windows": [], "images": [], "problems": [], "scenario": {}}
    args.update(kw)
    return markdown.run_markdown(run, **args).splitlines()


def test_mqperf_row_formats_rates_and_latencies_in_ms(row: dict[str, Any]) -> None:
    lines = lines_of(row)
    i = lines.index("## mqperf table")
    assert lines[i + 2 : i + 5] == [
        "| Threads | Processes | Sender nodes | Receiver nodes | Send msgs/s | Receive msgs/s "
        "| Processing latency p95 | Send latency p95 |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
        "| 4/8 | 3/1 | 2 | 4 | 12,345 | 1,000 | 1,234.6 ms | unknown |",
    ]
    same = lines_of({**row, "receiver_threads": 4, "receiver_processes": 3})
    assert "| 4 | 3 | 2 | 4 | 12,345 | 1,000 | 1,234.6 ms | unknown |" in same
    # a row summarized before processes were counted: a run with one per node
    older = lines_of({**row, "sender_processes": None, "receiver_processes": None})
    assert "| 4/8 | 1 | 2 | 4 | 12,345 | 1,000 | 1,234.6 ms | unknown |" in older


def test_measured_periods_count_from_the_senders_start(row: dict[str, Any]) -> None:
    windows = [
        {"processing_us_p95": 2_000, "processing_us_count": 10},
        {"processing_us_p95": 5_500, "processing_us_count": 3},
        {"processing_us_p95": 9_999_999, "processing_us_count": 0},  # nothing received: left out
    ]
    lines = lines_of(row, windows=windows)
    text = "\n".join(lines)
    assert f"Times are seconds since the senders started ({ORIGIN} ms since the epoch). " in text
    assert "The first 2.5 s are warm-up and not counted." in text
    assert "| send | +3.000 s | +10.250 s | 7.250 | 12,345 | 0.012 |" in lines
    assert "| receive | – | – | nothing counted | 1,000 | 0.000 |" in lines
    assert any(ln.startswith("Max sender lag: 1,500 ms (") for ln in lines)
    assert (
        "Processing latency p95 per 60 s window: worst 5.5 ms, best 2.0 ms over 2 windows."
    ) in lines
    assert not any("per 60 s window" in ln for ln in lines_of(row, windows=[]))


def test_delivery_and_latency_tables(row: dict[str, Any]) -> None:
    lines = lines_of(row)
    assert "| confirmed | 1,234,567 |  | send() returned |" in lines  # not a checker's: no share
    assert "| lost | 0 | 0 % | confirmed, never received, and not left in the broker |" in lines
    assert (
        "**Undrained:** 12 message(s) were still in the broker when the receivers stopped; "
        "they are not counted as lost."
    ) in lines
    assert (
        "| metric | count | mean | p50 | p75 | p90 | p95 | p99 | p99.9 | p99.99 | p99.9999 | max |"
    ) in lines
    assert (
        "| processing_us | 1,000 | 1,234.6 | 1,000 | 2,000 | 3,000 | 1,234,567 | 5,000 | 6,000 "
        "| 7,000 | 8,000 | 3,600,000,000 |"
    ) in lines
    # below zero known, above the maximum unknown: shown as 0 there, with the reason apart
    assert "- processing_us: 3 below zero, 0 above 1 h" in lines
    i = lines.index("**Out-of-range counts unknown:**")
    assert lines[i + 2] == "- processing_us_above_max: worker.json of receiver-01 missing"


@pytest.mark.parametrize(
    ("workload", "shown"),
    [
        ({"mode": "fixed_rate", "rate_per_s": 50.0}, ", fixed rate, 50 msgs/s per sender thread"),
        ({"mode": "fixed_rate", "rate_per_s": 12.5}, ", fixed rate, 12.5 msgs/s per sender thread"),
        ({"mode": "closed_loop"}, ", closed loop"),
        ({}, ""),
    ],
)
def test_header_names_the_schedule(row: dict[str, Any], workload: dict, shown: str) -> None:
    lines = lines_of(row, scenario={"workload": workload})
    assert f"- message size 100 bytes, batch 1{shown}" in lines
    assert (
        "- 2 sender node(s) × 3 process(es) × 4 threads, "
        "4 receiver node(s) × 1 process(es) × 8 threads"
    ) in lines


def test_cost_line_of_a_priced_lab(row: dict[str, Any]) -> None:
    priced = {
        **row,
        "price_per_hour_usd": 3.06,
        "lab_name": "eu-3x",
        "lab_kind": "aws",
        "run_hours": 0.25,
        "cost_usd": 0.765,
        "cost_per_million_delivered_usd": None,
        "context_unknown": json.dumps(
            {"cost_per_million_delivered_usd": "no message was delivered"}
        ),
    }
    assert (
        "- lab `eu-3x` (aws) at $3.06/h: cost $0.7650 over 15.0 min, unknown per million "
        "messages delivered (no message was delivered)"
    ) in lines_of(priced)
    dear = {**priced, "run_hours": 2.0, "cost_usd": 6.12, "cost_per_million_delivered_usd": 1500.0}
    assert (
        "- lab `eu-3x` (aws) at $3.06/h: cost $6.12 over 120.0 min, $1,500.00 per million "
        "messages delivered"
    ) in lines_of(dear)
    assert not any(ln.startswith("- lab `") for ln in lines_of(row))  # local: no price


def test_clock_section_only_for_several_hosts_or_an_unknown_bound(row: dict[str, Any]) -> None:
    assert "## Clocks" not in lines_of(row)  # one host
    unmeasured = {
        **row,
        "cluster_target": "aws",
        "clock_bound_ms": None,
        "clock_hosts": "{}",
        "clock_within_budget": None,
        "context_unknown": json.dumps({"clock_bound_ms": "clock offsets were not measured"}),
    }
    lines = lines_of(unmeasured)
    i = lines.index("## Clocks")
    assert lines[i + 2].startswith("Clock error bound: unknown (clock offsets were not measured).")
    hosts = {
        "client-1": {"offset_ms": 0.8, "bound_ms": 0.11, "drift_ms": 0.1},
        "client-2": {"offset_ms": -2.5, "bound_ms": 0.07, "drift_ms": None},
    }
    over = {
        **row,
        "clock_hosts": json.dumps(hosts),
        "clock_bound_ms": 0.67,
        "clock_budget_ms": 0.5,
        "clock_within_budget": False,
    }
    lines = lines_of(over)
    assert any(
        ln.startswith("Clock error bound: 0.67 ms (over the budget 0.5 ms).") for ln in lines
    )
    assert any(ln.startswith("**Problem:** clock error bound 0.67 ms exceeds") for ln in lines)
    assert "| client-1 | +0.800 | 0.110 | 0.1 |" in lines
    assert "| client-2 | -2.500 | 0.070 | not measured |" in lines


def test_input_problems_are_listed_relative_to_the_run_and_capped(
    row: dict[str, Any], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    problems = [
        {"file": f"{run_dir.resolve()}/workers/receiver-00/counts.csv", "line": n, "problem": "bad"}
        for n in range(2, 24)
    ]
    problems.append({"file": "manifest.json", "line": None, "problem": "clock error bound 9 ms"})
    lines = lines_of(
        {**row, "bad_lines": 22, "missing_files": 0}, problems=problems, run_dir=run_dir
    )
    i = lines.index("## Input problems")
    assert lines[i + 2] == (
        "22 bad line(s) and 0 missing or unreadable file(s) were skipped and counted (all of "
        "them in `summary/problems.parquet`):"
    )
    shown = lines[i + 4 :]
    assert shown[0] == "- `workers/receiver-00/counts.csv:2`: bad"
    assert shown[19] == "- `workers/receiver-00/counts.csv:21`: bad"
    assert shown[20:] == ["- … and 2 more"]  # 22 bad lines; the clock's line is not one
    assert "## Input problems" not in lines_of(row)


def test_the_queues_note_shows_only_for_several_queues() -> None:
    assert cells.queues_note({"queues": None}) is None  # summarized before queues
    assert cells.queues_note({"queues": 1}) is None
    assert cells.queues_note({"queues": 10}) == (
        "10 queues: sender thread s sends to queue s mod 10, receiver thread r receives "
        "from queue r mod 10"
    )
