"""The site's experiments, broker overview and mqperf 2021 charts, checked against
figures computed here from the archives (summary.json, scenario.toml) and the published
CSV, never from the site's own code."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

from mqlab.archive import layout
from mqlab.published.reference import load_reference
from mqlab.report import charts
from tests.fixtures.committed import ROOT, committed_runs

from .conftest import Built
from .parse import column, read_page

MQPERF_CSV = ROOT / "mqlab" / "published" / "data" / "mqperf-2021.csv"


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / layout.SUMMARY).read_text())


def _scenario(run_dir: Path) -> dict:
    return tomllib.loads((run_dir / layout.SCENARIO).read_text())


def _readable(built: Built) -> list[Path]:
    return [
        p
        for p in sorted(built.lab.results.iterdir())
        if (p / layout.MANIFEST).is_file() and p.name != built.lab.broken.name
    ]


def test_the_index_groups_the_runs_by_folder_and_family(built: Built) -> None:
    expected: dict[tuple[str, str], int] = {}
    for p in _readable(built):
        doc = _scenario(p)
        ref = doc.get("reference")
        fam = (
            ref["set"]
            if isinstance(ref, dict)
            else "-".join(w for w in doc["name"].split("-") if w != doc["broker"])
        )
        expected[(".", fam)] = expected.get((".", fam), 0) + 1
    table = read_page(built.out / "index.html").table("experiments")
    shown = {
        (column(table, r, "Folder").text, column(table, r, "Scenario family").text): int(
            column(table, r, "Runs").text
        )
        for r in table.rows
    }
    assert shown == expected
    pages = sorted((built.out / "experiments").glob("*.html"))
    assert len(pages) == len(table.rows)
    for page in pages:  # each lists its runs, as many as the index says
        assert len(read_page(page).table("runs").rows) in shown.values()


def test_the_broker_overview_has_each_brokers_best_throughput(built: Built) -> None:
    best: dict[str, float] = {}
    runs: dict[str, int] = {}
    rated: dict[str, int] = {}
    for p in _readable(built):
        broker = _scenario(p)["broker"]
        runs[broker] = runs.get(broker, 0) + 1
        if (p / layout.SUMMARY).is_file():
            send = _summary(p)["throughput"]["send_msgs_per_s"]
            if send is not None:
                best[broker] = max(best.get(broker, send), send)
            rate = (_scenario(p).get("workload") or {}).get("rate_per_s") or 0
            if rate > 0:
                rated[broker] = rated.get(broker, 0) + 1
    page = read_page(built.out / "brokers.html")
    table = page.table("brokers")
    assert {r.attrs["data-broker"] for r in table.rows} == set(runs)
    for row in table.rows:
        broker = row.attrs["data-broker"]
        assert int(column(table, row, "runs").text) == runs[broker]
        cell = column(table, row, "best send msgs/s")
        assert float(cell.attrs["data-sort"]) == best[broker], broker
        if rated.get(broker):
            assert len(page.table(f"rates-{broker}").rows) == rated[broker]
        else:
            assert f"rates-{broker}" not in page.ids


def test_the_mqperf_charts_points_are_the_runs_and_the_published_rows() -> None:
    runs = [p for p in committed_runs("results/seeds/mqperf-2021/*")]
    assert runs
    broker = _scenario(runs[0])["broker"]
    mine = [p for p in runs if _scenario(p)["broker"] == broker]
    rows = [r for r in load_reference() if r.broker == broker]
    with MQPERF_CSV.open() as f:
        published = [r for r in csv.DictReader(f) if r["system"] == rows[0].system]
    assert len(published) == len(rows)
    run_rows = [{"summary": _summary(p)} for p in mine]
    from mqlab.analysis.catalog import read_run_table

    tables = [read_run_table(p, "runs").to_pylist()[0] for p in mine]
    shapes = sorted(
        {(t["sender_nodes"], t["receiver_nodes"], t["sender_threads"]) for t in tables}
        | {
            (int(r["sender_nodes"]), int(r["receiver_nodes"]), int(r["sender_threads"]))
            for r in published
        }
    )
    got_mine, got_theirs = charts.points(tables, rows, "send_msgs_per_s", 1.0, "send_msgs_per_s")
    expected_mine = sorted(
        (
            shapes.index((t["sender_nodes"], t["receiver_nodes"], t["sender_threads"])),
            r["summary"]["throughput"]["send_msgs_per_s"],
        )
        for t, r in zip(tables, run_rows, strict=True)
    )
    assert got_mine == expected_mine
    assert got_theirs == sorted(
        (
            shapes.index(
                (int(r["sender_nodes"]), int(r["receiver_nodes"]), int(r["sender_threads"]))
            ),
            float(r["send_msgs_per_s"]),
        )
        for r in published
    )
    _m, p95 = charts.points(
        tables, rows, "processing_us_p95", 1 / 1000, "processing_latency_p95_ms"
    )
    assert sorted(v for _x, v in p95) == sorted(
        float(r["processing_latency_p95_ms"]) for r in published
    )
