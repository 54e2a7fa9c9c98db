"""What `mqlab ls` lists (mqlab/report/listing.py): every run directory, readable
or not, the filters, and each row's cells, checked against hand-written values."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mqlab.archive import layout
from mqlab.archive.formats import V1_FIX
from mqlab.archive.layout import RunInfo
from mqlab.errors import MqlabError
from mqlab.report import listing

from .archive import START_MS, write_tiny_run
from .conftest import Lab

OLD = "2024-01-01T00-00-00Z_old_nats-r3_1t-1s-1r"
BROKEN = "2024-06-01T00-00-00Z_broken_nats-r3_1t-1s-1r"


@pytest.fixture
def results(lab: Lab, tmp_path: Path) -> Path:
    """The lab's two summarized runs, one never summarized, one of archive format 1 and one
    whose manifest is not JSON."""
    results = tmp_path / "results"
    for r in (lab.complete, lab.no_delivery):
        shutil.copytree(r.run_dir, results / r.run_id)
    write_tiny_run(results, start_ms=START_MS + 120_000)  # 2 min later: never summarized
    old = results / OLD
    old.mkdir()
    (old / layout.MANIFEST).write_text(json.dumps({"format_version": 1, "status": "complete"}))
    broken = results / BROKEN
    broken.mkdir()
    (broken / layout.MANIFEST).write_text("{not json")
    (broken / layout.SCENARIO).write_text('name = "broken"\nbroker = "redis"\n')
    return results


def test_every_run_directory_is_listed_oldest_first_readable_or_not(
    lab: Lab, results: Path
) -> None:
    listed = listing.list_runs(results)
    ids = [x.info.run_id for x in listed]
    never = "2025-11-22T10-24-05Z_tiny_nats-r3_2t-1s-2r"  # START_MS + 2 min, whole seconds
    # START_MS, + 1 min (3 threads) and + 2 min
    assert ids == [OLD, BROKEN, lab.complete.run_id, lab.no_delivery.run_id, never]
    problems = {x.info.run_id: x.problem for x in listed}
    assert problems[OLD] == "archive format_version 1"
    assert problems[BROKEN] is not None and "manifest.json" in problems[BROKEN]
    assert problems[lab.complete.run_id] is None and problems[never] is None
    # what could be read of the broken one: its scenario
    broken = next(x for x in listed if x.info.run_id == BROKEN)
    assert (broken.info.broker, broken.info.scenario_name) == ("redis", "broken")
    assert listing.fix_hint(listed) == V1_FIX
    assert listing.fix_hint([x for x in listed if x.info.run_id != OLD]) is None


def test_a_missing_results_directory_lists_nothing(tmp_path: Path) -> None:
    assert listing.list_runs(tmp_path / "nowhere") == []


def test_rows_of_summarized_unsummarized_and_unreadable_runs(lab: Lab, results: Path) -> None:
    rows = {x.info.run_id: listing.row(x) for x in listing.list_runs(results)}
    done = rows[lab.complete.run_id]
    # the tiny run: 2 lost, 1 undrained (tests/report/archive.py)
    assert (done["status"], done["summarized"], done["lost"], done["undrained"]) == (
        "complete",
        True,
        2,
        1,
    )
    assert done["unknown"] == {} and done["cost_usd"] is None
    partial = rows[lab.no_delivery.run_id]
    assert partial["status"] == "partial" and partial["lost"] is None
    assert partial["unknown"]["lost"] == "delivery.json of receiver-01 missing or unreadable"
    never = rows["2025-11-22T10-24-05Z_tiny_nats-r3_2t-1s-2r"]
    assert never["summarized"] is False and never["send_msgs_per_s"] is None
    assert never["status"] == "complete"  # the manifest's
    cells = listing.cells(never)
    assert cells[5:] == ["–", "–", "–", "–", ""]  # no price: no cost cell
    assert rows[OLD]["status"] == "archive format_version 1"
    assert listing.cells(rows[OLD])[:5] == [OLD, ".", "?", "?", "archive format_version 1"]


def test_filters_by_broker_scenario_and_day(lab: Lab, results: Path) -> None:
    listed = listing.list_runs(results)

    def ids(**kw: Any) -> list[str]:
        return [x.info.run_id for x in listing.filter_runs(listed, **kw)]

    tiny = [lab.complete.run_id, lab.no_delivery.run_id]
    tiny.append("2025-11-22T10-24-05Z_tiny_nats-r3_2t-1s-2r")
    assert ids(broker="nats") == tiny  # the old and the broken runs name no nats broker
    assert ids(broker="redis") == [BROKEN]
    assert ids(scenario="tiny") == tiny and ids(scenario="quickstart") == []
    # the tiny runs started on 2025-11-22 (manifest started_at); until is exclusive
    assert ids(since="2025-11-22", broker="nats") == tiny
    assert ids(since="2025-11-23") == []
    assert ids(until="2025-11-22", broker="nats") == []
    assert ids(until="2025-11-23", broker="nats") == tiny
    with pytest.raises(MqlabError, match=r"--since: 'yesterday' is not a date \(use YYYY-MM-DD\)"):
        ids(since="yesterday")
    with pytest.raises(MqlabError, match="--until: '2025-13-01' is not a date"):
        ids(until="2025-13-01")


def _row(summary: dict[str, Any] | None) -> dict[str, Any]:
    info = RunInfo(
        Path("/r/x"), "x", {"status": "complete"}, {"broker": "kafka", "name": "s"}, summary
    )
    return listing.row(listing.Listed(info))


def test_cells_format_figures_and_the_cost() -> None:
    summary = {
        "status": "complete",
        "throughput": {"send_msgs_per_s": 12345.6, "receive_msgs_per_s": 0.4},
        "delivery": {"lost": 1234567, "undrained": None},
        "unknown": {"undrained": "the broker did not answer", "received": "elsewhere"},
        "lab": {"price_per_hour_usd": 1.53},
        "cost_usd": 0.0123,
        "cost_per_million_delivered_usd": 1.0,
    }
    d = _row(summary)
    assert d["unknown"] == {"undrained": "the broker did not answer"}  # delivery figures only
    assert listing.cells(d) == [
        "x",
        ".",
        "kafka",
        "s",
        "complete",
        "12,346",
        "0",
        "1,234,567",
        "unknown",
        "$0.0123 ($1.00/M)",  # below $1 to 1/100 cent, from $1 on to the cent
    ]
    d = _row({**summary, "cost_usd": 1234.5, "cost_per_million_delivered_usd": None})
    assert listing.cells(d)[-1] == "$1,234.50 (unknown/M)"
    d = _row({**summary, "lab": {"price_per_hour_usd": None}})
    assert listing.cells(d)[-1] == ""  # a lab without a price: no cost at all
    assert len(listing.cells(d)) == len(listing.COLUMNS)
    # a priced lab whose run was never summarized
    unsummarized = {**d, "summarized": False, "price_per_hour_usd": 1.53}
    assert listing.cells(unsummarized)[5:] == ["–"] * 5
