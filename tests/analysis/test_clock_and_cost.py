"""The run's context in the summary: the clock error bound against its budget (and the
problem line of a run over budget), and the cost of a run on a lab with a price, each
checked against values worked out by hand from the manifest and the raw files; old
manifests and catalogs stay readable."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqlab.analysis import catalog
from mqlab.analysis.job import summarize_run
from mqlab.archive import layout, records
from mqlab.archive.formats import write_json
from mqlab.hosts.clocks import ClockEstimate, clock_section
from tests.fixtures.committed import committed_runs
from tests.fixtures.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run

PRICE = 3.06  # USD per hour
SPEC = SyntheticSpec(sender_nodes=2, sender_threads=2, receiver_threads=2, duration_s=8.0)
HOSTS = {
    "client-1": (0.8, 0.11, 0.9),
    "client-2": (-2.5, 0.07, -2.2),
    "client-3": (12.0, 0.3, None),
}


def _patch_manifest(run: SyntheticRun, **sections: Any) -> dict[str, Any]:
    path = run.run_dir / layout.MANIFEST
    doc = json.loads(path.read_text())
    doc.update(sections)
    write_json(path, doc)
    return doc


def _measured(budget_ms: float) -> dict[str, Any]:
    """Senders on client-1 and client-2, receivers on client-2 and client-3 (client-3 not
    measured again after the run)."""
    before = {h: ClockEstimate(o, b, 2 * b, 40) for h, (o, b, _a) in HOSTS.items()}
    after = {h: ClockEstimate(a, b, 2 * b, 40) for h, (_o, b, a) in HOSTS.items() if a is not None}
    senders = {"sender-00": "client-1", "sender-01": "client-2"}
    receivers = {"receiver-00": "client-2", "receiver-01": "client-3"}
    return clock_section(before, after, senders, receivers, budget_ms)


# per host: its bound plus how far its offset drifted by the end (0 when not measured
# after): client-1 0.11 + 0.1 = 0.21, client-2 0.07 + 0.3 = 0.37, client-3 0.3 + 0 = 0.3;
# the worst (sender host, receiver host) pair on different hosts: client-2 -> client-3,
# 0.37 + 0.3 (client-1 -> client-2: 0.58, client-1 -> client-3: 0.51)
BOUND_MS = 0.67


def _lab(price: float | None) -> dict[str, Any]:
    return {
        "kind": "aws",
        "name": "eu-3x",
        "price_per_hour_usd": price,
        "hosts": {h: {"role": "client", "address": "10.0.0.1"} for h in HOSTS},
    }


def _problems(run: SyntheticRun) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(
        catalog.run_file(run.run_dir, "problems")
    ).to_pylist()
    return rows


# -- clocks ---------------------------------------------------------------------------
def test_clock_bound_within_budget(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SPEC)
    _patch_manifest(run, clock=_measured(budget_ms=5.0))
    summary = summarize_run(run.run_dir)
    assert summary["clock_bound_ms"] == pytest.approx(BOUND_MS)
    assert summary["clock_budget_ms"] == 5.0 and summary["clock_within_budget"] is True
    assert summary["clock"]["method"] == "ntp-style over ssh"
    assert summary["clock"]["hosts"]["client-2"] == {
        "offset_ms": -2.5,
        "bound_ms": 0.07,
        "drift_ms": pytest.approx(0.3),
    }
    assert summary["clock"]["hosts"]["client-3"]["drift_ms"] is None
    assert "clock_bound_ms" not in summary["context_unknown"]
    assert summary["status"] == "complete" and summary["unknown"] == {}
    assert _problems(run) == []


def test_a_clock_bound_over_budget_is_a_problem_line(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SPEC)
    _patch_manifest(run, clock=_measured(budget_ms=0.5))
    summary = summarize_run(run.run_dir)
    assert summary["clock_within_budget"] is False
    assert summary["clock_bound_ms"] == pytest.approx(BOUND_MS)
    (problem,) = _problems(run)
    assert problem["problem"] == (
        "clock error bound 0.67 ms exceeds the budget 0.5 ms: end-to-end "
        "latencies between hosts are uncertain by that much"
    )
    assert problem["file"].endswith("manifest.json") and problem["line"] is None
    # not an input problem: no file is missing, the figures are all there
    assert summary["problems"] == {"bad_lines": 0, "missing_files": 0}
    assert summary["status"] == "complete"


def test_unmeasured_clocks_are_null_with_a_reason_and_old_shapes_read(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SPEC)  # the fixture's clock: {"hosts": {}}
    summary = summarize_run(run.run_dir)
    assert summary["clock_bound_ms"] is None and summary["clock_within_budget"] is None
    assert summary["context_unknown"]["clock_bound_ms"] == (
        "clock offsets between hosts were not measured"
    )
    assert summary["status"] == "complete" and summary["unknown"] == {}  # not partial
    # the older one-host shape (format 2 before the clock sections): bound 0
    doc = _patch_manifest(
        run,
        clock={
            "source": "tsc",
            "wall_clock": "time.time_ns",
            "hosts": {"local": {"offset_ms": 0.0, "error_bound_ms": 0.0}},
            "note": "one host: every worker and broker reads the same kernel clock",
        },
    )
    m = records.read_manifest(run.run_dir / layout.MANIFEST)
    assert (m.clock.method, m.clock.bound_ms, m.clock.within_budget) == ("one host", 0.0, True)
    assert summarize_run(run.run_dir)["clock_bound_ms"] == 0.0
    doc.pop("clock")
    doc["cluster"]["target"] = "local"  # no clock section, local: one clock
    write_json(run.run_dir / layout.MANIFEST, doc)
    assert records.read_manifest(run.run_dir / layout.MANIFEST).clock.bound_ms == 0.0
    doc["cluster"]["target"] = "aws"
    write_json(run.run_dir / layout.MANIFEST, doc)
    m = records.read_manifest(run.run_dir / layout.MANIFEST)
    assert m.clock.bound_ms is None and m.clock.unknown == "no clock section"
    assert (m.lab.kind, m.lab.price_per_hour_usd) == ("aws", None)


def test_the_committed_quickstart_manifest_still_reads() -> None:
    runs = committed_runs("results/*_quickstart_*")
    if not runs:
        pytest.skip("no committed run")
    m = records.read_manifest(runs[0] / layout.MANIFEST)
    assert m.clock.bound_ms == 0.0 and m.lab.kind == "local" and m.lab.price_per_hour_usd is None


# -- cost -----------------------------------------------------------------------------
# SPEC: 2 sender nodes x 2 threads = 4 sender ids at 20 msgs/s each for 5 s warm-up + 8 s,
# none lost: 4 x 20 x 13 = 1040 messages delivered
DELIVERED = 1040


def _times(run: SyntheticRun, started_at: str, ended_at: str | None) -> None:
    path = run.run_dir / layout.MANIFEST
    doc = json.loads(path.read_text())
    doc.update(started_at=started_at, ended_at=ended_at)
    write_json(path, doc)


def _unique_delivered(run: SyntheticRun) -> int:
    """Independently: the distinct (sender id, seq) pairs in every delivery.json."""
    seen: set[tuple[int, int]] = set()
    for path in run.run_dir.glob("workers/receiver-*/delivery.json"):
        for sid, rec in records.read_delivery(path).senders.items():
            seen.update((sid, q) for q in rec.seqs)
    return len(seen)


def test_cost_and_cost_per_million_delivered(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SPEC)
    _patch_manifest(run, lab=_lab(PRICE))
    _times(run, "2025-11-22T10:00:00.000+00:00", "2025-11-22T10:30:00.000+00:00")
    summary = summarize_run(run.run_dir)
    assert _unique_delivered(run) == run.delivery["unique_received"] == DELIVERED
    assert summary["run_hours"] == 0.5
    assert summary["cost_usd"] == pytest.approx(1.53, abs=1e-9)  # 3.06 $/h x 0.5 h
    # $1.53 / 1040 messages x 1e6 = $1471.1538461...; rounded to 1e-6 USD
    assert summary["cost_per_million_delivered_usd"] == pytest.approx(1471.153846, abs=1e-9)
    assert summary["lab"] == {"kind": "aws", "name": "eu-3x", "price_per_hour_usd": PRICE}
    assert set(summary["context_unknown"]) == {"clock_bound_ms"}  # the fixture's clock
    run_row = catalog.load_runs(run.run_dir.parent)[0]
    assert run_row["cost_usd"] == summary["cost_usd"]
    assert run_row["cost_per_million_delivered_usd"] == summary["cost_per_million_delivered_usd"]
    assert run_row["price_per_hour_usd"] == PRICE and run_row["lab_kind"] == "aws"


@pytest.mark.parametrize(
    ("started_at", "ended_at", "hours", "cost"),
    [
        # "Z" and another zone: 10:00 UTC to 10:15 UTC
        ("2025-11-22T10:00:00Z", "2025-11-22T11:15:00+01:00", 0.25, 0.765),
        # no zone: read as UTC; 1 s is 1/3600 h = 0.000278 h (rounded), $0.00085
        ("2025-11-22T10:00:00", "2025-11-22T10:00:01", 0.000278, 0.00085),
        # an end equal to the start: nothing to pay
        ("2025-11-22T10:00:00Z", "2025-11-22T10:00:00Z", 0.0, 0.0),
    ],
)
def test_run_hours_across_time_zones_and_edges(
    tmp_path: Path, started_at: str, ended_at: str, hours: float, cost: float
) -> None:
    run = write_synthetic_run(tmp_path, SPEC)
    _patch_manifest(run, lab=_lab(PRICE))
    _times(run, started_at, ended_at)
    summary = summarize_run(run.run_dir)
    assert summary["run_hours"] == pytest.approx(hours, abs=1e-9)
    assert summary["cost_usd"] == pytest.approx(cost, abs=1e-9)


def test_an_end_before_the_start_leaves_the_cost_unknown(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SPEC)
    _patch_manifest(run, lab=_lab(PRICE))
    _times(run, "2025-11-22T10:00:00Z", "2025-11-22T09:59:59Z")
    summary = summarize_run(run.run_dir)
    assert summary["run_hours"] is None and summary["cost_usd"] is None
    assert summary["cost_per_million_delivered_usd"] is None
    assert "start or end time" in summary["context_unknown"]["cost_usd"]


def test_no_price_gives_null_cost_with_a_reason(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SPEC)  # no lab section: no price
    summary = summarize_run(run.run_dir)
    assert summary["cost_usd"] is None and summary["cost_per_million_delivered_usd"] is None
    why = summary["context_unknown"]
    assert "no price per hour" in why["cost_usd"]
    assert why["cost_per_million_delivered_usd"] == why["cost_usd"]
    assert summary["status"] == "complete" and summary["unknown"] == {}
    _patch_manifest(run, lab=_lab(None))
    assert "aws" in summarize_run(run.run_dir)["context_unknown"]["cost_usd"]


def test_nothing_delivered_gives_a_cost_but_no_cost_per_million(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SPEC)
    _patch_manifest(run, lab=_lab(PRICE))
    _times(run, "2025-11-22T10:00:00Z", "2025-11-22T12:00:00Z")
    for path in run.run_dir.glob("workers/receiver-*/delivery.json"):
        records.write_delivery(path, records.DeliveryRecord({}, 0))
    summary = summarize_run(run.run_dir)
    assert summary["delivery"]["unique_received"] == 0
    assert summary["cost_usd"] == pytest.approx(6.12, abs=1e-9)  # 3.06 $/h x 2 h
    assert summary["cost_per_million_delivered_usd"] is None
    assert summary["context_unknown"]["cost_per_million_delivered_usd"] == (
        "no message was delivered"
    )


def test_unknown_deliveries_or_end_time_leave_the_cost_unknown(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, replace(SPEC, omit=("workers/receiver-01/delivery.json",)))
    doc = _patch_manifest(run, lab=_lab(PRICE))
    summary = summarize_run(run.run_dir)
    assert summary["cost_usd"] is not None and summary["cost_per_million_delivered_usd"] is None
    assert summary["context_unknown"]["cost_per_million_delivered_usd"].startswith(
        "messages delivered unknown: delivery.json of receiver-01"
    )
    doc["ended_at"] = None
    write_json(run.run_dir / layout.MANIFEST, doc)
    summary = summarize_run(run.run_dir)
    assert summary["cost_usd"] is None and summary["run_hours"] is None
    assert "start or end time" in summary["context_unknown"]["cost_usd"]


# -- the catalog ----------------------------------------------------------------------
def test_an_older_catalog_keeps_its_rows_with_the_new_columns_null(tmp_path: Path) -> None:
    first = write_synthetic_run(tmp_path, SPEC)
    summarize_run(first.run_dir)
    path = catalog.catalog_file(tmp_path, "runs")
    old = pq.read_table(path)
    new_columns = ["cost_usd", "cost_per_million_delivered_usd", "clock_bound_ms", "lab_kind"]
    pq.write_table(old.drop_columns(new_columns), path)  # as an older mqlab wrote it
    second = write_synthetic_run(tmp_path, replace(SPEC, start_s=SPEC.start_s + 3600))
    _patch_manifest(second, lab=_lab(PRICE))
    summarize_run(second.run_dir)
    rows = {r["run_id"]: r for r in catalog.load_runs(tmp_path)}
    assert set(rows) == {first.run_id, second.run_id}
    assert rows[first.run_id]["cost_usd"] is None and rows[first.run_id]["lab_kind"] is None
    assert rows[first.run_id]["send_msgs_per_s"] > 0
    assert rows[second.run_id]["cost_usd"] > 0
