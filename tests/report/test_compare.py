"""`mqlab compare`'s logic: finding runs, ratios, the noise verdict from repeated trials,
the worst window and the match against published rows. Expected values are worked out
by hand in the comments."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mqlab.analysis import catalog
from mqlab.errors import ArchiveError
from mqlab.published import reference
from mqlab.report import compare

from .conftest import Lab

HIGHER = ("send_msgs_per_s", True)  # throughput: higher is better
LOWER = ("processing_us_p95", False)  # latency: lower is better


def trials(field: str, *values: float | None, prefix: str = "r") -> list[dict[str, Any]]:
    return [{"run_id": f"{prefix}{i}", field: v} for i, v in enumerate(values)]


# -- the noise verdict ---------------------------------------------------------------------
def test_two_configurations_differ_beyond_twice_the_standard_error() -> None:
    # base 100, 102, 98: mean 100, variance 4; contender 110, 112, 108: mean 110, variance 4;
    # standard error sqrt(4/3 + 4/3) = 1.633, so 10 is beyond 2 x 1.633 = 3.27
    for field, higher in (HIGHER, LOWER):
        base = trials(field, 100, 102, 98)
        cont = trials(field, 110, 112, 108, prefix="c")
        verdict = compare._noise_verdict(field, higher, (100, 110), base, cont)
        assert verdict == ("better" if higher else "worse")
        # and the other way round
        verdict = compare._noise_verdict(field, higher, (110, 100), cont, base)
        assert verdict == ("worse" if higher else "better")
    # contender 101, 103, 99: a difference of 1 is within 3.27
    base, cont = trials("f", 100, 102, 98), trials("f", 101, 103, 99, prefix="c")
    assert compare._noise_verdict("f", True, (100, 101), base, cont) == "within noise"


def test_a_difference_of_exactly_twice_the_standard_error_is_noise() -> None:
    # base 0, 4: mean 2, variance 8, 8/2 = 4; contender 6, 6: variance 0; se = 2
    base, cont = trials("f", 0, 4), trials("f", 6, 6, prefix="c")
    assert compare._noise_verdict("f", True, (0, 6), base, cont) == "within noise"  # 4 <= 4
    cont = trials("f", 6.5, 6.5, prefix="c")  # 4.5 > 4
    assert compare._noise_verdict("f", True, (0, 6.5), base, cont) == "better"


def test_trials_of_one_configuration_compare_the_pair_with_the_others_spread() -> None:
    # trials 100, 104, 96, 100; the pair (100, 104): the others 96, 100 have variance 8,
    # se = sqrt(2 x 8) = 4, and a difference of 4 is within 2 x 4
    same = trials("f", 100, 104, 96, 100)
    assert compare._noise_verdict("f", True, (100, 104), same, same) == "within noise"
    # the pair (96, 104): the others 100, 100 have no spread, so 8 is beyond it
    assert compare._noise_verdict("f", True, (96, 104), same, same) == "better"
    assert compare._noise_verdict("f", False, (96, 104), same, same) == "worse"
    # three trials 100, 110, 105: one other left, so the spread of all three (variance 25):
    # se = sqrt(50) = 7.07, and 10 is within 14.1
    three = trials("f", 100, 110, 105)
    assert compare._noise_verdict("f", True, (100, 110), three, three) == "within noise"
    # a figure unknown in one of the pair: no verdict
    with_none = trials("f", 100, None, 96, 100)
    assert compare._noise_verdict("f", True, (100, None), with_none, with_none) == ""


def test_too_few_known_trials_make_the_noise_unknown() -> None:
    assert (
        compare._noise_verdict("f", True, (1, 2), trials("f", 1), trials("f", 2, 3, 4))
        == "noise unknown (1 vs 3 trials)"
    )
    # unknown figures do not count as trials
    base = trials("f", 1, None, None)
    assert compare._noise_verdict("f", True, (1, 2), base, trials("f", 2, 3)) == (
        "noise unknown (1 vs 2 trials)"
    )


# -- compare_runs ---------------------------------------------------------------------------
def test_compare_runs_gives_ratios_and_no_ratio_for_an_unknown_or_zero_baseline() -> None:
    base = {"run_id": "b", "send_msgs_per_s": 200.0, "processing_us_p95": 0, "delivery_lost": 4}
    cont = {"run_id": "c", "send_msgs_per_s": 250.0, "processing_us_p95": 900}
    lines = {ln.field: ln for ln in compare.compare_runs(base, cont)}
    assert [ln.field for ln in compare.compare_runs(base, cont)] == [
        f for f, _, _ in compare.FIGURES
    ]
    send = lines["send_msgs_per_s"]
    assert (send.label, send.baseline, send.contender, send.ratio) == (
        "send msgs/s",
        200.0,
        250.0,
        1.25,
    )
    assert send.verdict == "noise unknown (1 vs 1 trials)"  # one run each
    assert lines["processing_us_p95"].ratio is None  # a baseline of 0
    lost = lines["delivery_lost"]
    assert (lost.baseline, lost.contender, lost.ratio) == (4, None, None)  # contender unknown
    missing = lines["receive_msgs_per_s"]
    assert (missing.baseline, missing.contender, missing.ratio) == (None, None, None)


def test_compare_runs_with_trials_gives_verdicts() -> None:
    base = trials("send_msgs_per_s", 100, 102, 98)
    cont = trials("send_msgs_per_s", 110, 112, 108, prefix="c")
    lines = {ln.field: ln for ln in compare.compare_runs(base[0], cont[0], base, cont)}
    assert lines["send_msgs_per_s"].verdict == "better"
    assert lines["send_msgs_per_s"].ratio == pytest.approx(1.1)
    assert lines["processing_us_p95"].verdict == "noise unknown (0 vs 0 trials)"


# -- finding runs in the catalog --------------------------------------------------------------
def test_resolve_run_by_directory_id_or_unique_part(lab: Lab, tmp_path: Path) -> None:
    complete, other = lab.complete.run_id, lab.no_delivery.run_id
    assert compare.resolve_run(str(lab.complete.run_dir), tmp_path)["run_id"] == complete
    assert compare.resolve_run(complete, lab.results)["run_id"] == complete
    assert compare.resolve_run("3t-1s-2r", lab.results)["run_id"] == other  # 3 threads
    with pytest.raises(ArchiveError, match="matches 2 runs; give more of the run id"):
        compare.resolve_run("tiny_nats-r3", lab.results)
    with pytest.raises(ArchiveError, match="no such run directory or summarized run"):
        compare.resolve_run("kafka", lab.results)


def test_a_moved_results_folder_names_its_runs_where_they_are_now(lab: Lab, tmp_path: Path) -> None:
    # a clone or a copy: the tables still carry the path the runs were summarized at
    moved = tmp_path / "elsewhere" / "results"
    shutil.copytree(lab.results, moved)
    name = lab.complete.run_dir.name
    by_dir = compare.resolve_run(str(moved / name), tmp_path)
    by_id = compare.resolve_run(lab.complete.run_id, moved)
    assert by_dir["run_dir"] == by_id["run_dir"] == str((moved / name).resolve())
    # nested one level (results/<set>/<run>), as the committed durability matrix is
    nested = tmp_path / "nested" / "results"
    (nested / "set").mkdir(parents=True)
    shutil.copytree(lab.results / ".catalog", nested / ".catalog")
    shutil.copytree(lab.results / name, nested / "set" / name)
    run = compare.resolve_run(lab.complete.run_id, nested)
    assert run["run_dir"] == str((nested / "set" / name).resolve())


def test_trials_of_are_the_runs_of_the_same_configuration(lab: Lab) -> None:
    run = compare.resolve_run(lab.complete.run_id, lab.results)
    # the other run of the lab has 3 threads: not a trial of this one
    assert [r["run_id"] for r in compare.trials_of(run, lab.results)] == [lab.complete.run_id]
    twin = {**run, "run_id": "not-in-the-catalog"}
    ids = [r["run_id"] for r in compare.trials_of(twin, lab.results)]
    assert ids == [lab.complete.run_id, "not-in-the-catalog"]  # itself added once


# -- worst window and the published rows ----------------------------------------------------
def _windows(run_dir: Path, p95: list[tuple[int, int]]) -> None:
    path = catalog.run_file(run_dir, "windows")
    path.parent.mkdir(parents=True)
    table = pa.table(
        {
            "window_index": list(range(len(p95))),
            "processing_us_p95": [p for p, _ in p95],
            "send_call_us_p95": [s for _, s in p95],
        },
        schema=pa.schema(
            [
                ("window_index", pa.int64()),
                ("processing_us_p95", pa.int64()),
                ("send_call_us_p95", pa.int64()),
            ],
            metadata={b"format_version": b"2"},
        ),
    )
    pq.write_table(table, path)


def test_worst_window_takes_each_figures_highest_window(tmp_path: Path) -> None:
    _windows(tmp_path / "run", [(5_000, 300), (9_000, 200), (7_000, 800)])
    run = {"run_dir": str(tmp_path / "run"), "window_s": 60.0}
    assert reference.worst_window(run) == {
        "window_s": 60.0,
        "processing_us_p95": 9_000,
        "send_call_us_p95": 800,  # from another window than the processing figure
    }
    _windows(tmp_path / "empty", [])
    assert reference.worst_window({"run_dir": str(tmp_path / "empty"), "window_s": 60.0}) is None
    assert reference.worst_window({"run_dir": str(tmp_path / "none"), "window_s": 60.0}) is None


def _run(tmp_path: Path, broker: str, st: int, sn: int, rn: int, lag: int = 0) -> dict[str, Any]:
    return {
        "run_id": f"{broker}-{st}",
        "run_dir": str(tmp_path / "unsummarized"),
        "window_s": 60.0,
        "broker": broker,
        "sender_threads": st,
        "receiver_threads": st,
        "sender_nodes": sn,
        "receiver_nodes": rn,
        "sender_lag_ms_max": lag,
    }


def test_against_reference_matches_notes_and_lists_the_published_configurations(
    tmp_path: Path,
) -> None:
    runs = [
        _run(tmp_path, "postgres", 5, 1, 2),
        _run(tmp_path, "nats", 5, 1, 2),
        _run(tmp_path, "postgres", 3, 1, 2),
        _run(tmp_path, "mqlab", 5, 1, 2, lag=250),
    ]
    pg, nats, pg3, unknown = reference.against_reference(runs, "mqperf-2021")
    # PostgreSQL,main,5,5,1,2,15073.0,15263.0,5738.0,48.0
    assert [(r.send_msgs_per_s, r.processing_latency_p95_ms) for r in pg.rows] == [
        (15073.0, 5738.0)
    ]
    assert pg.note is None and pg.other_configs == [] and pg.worst_window is None
    # NATS Streaming,main,5,5,1,2,3976.0,3995.0,142.0,48.0, approximately
    assert [r.send_msgs_per_s for r in nats.rows] == [3976.0]
    assert nats.note == "approximate: NATS Streaming (2021) vs NATS JetStream (mqlab)"
    assert pg3.rows == []
    assert pg3.note == (
        "no published mqperf-2021 row for broker postgres with these threads and nodes"
    )
    assert pg3.other_configs == [  # PostgreSQL's nine published configurations, sorted
        "1/1 threads, 1s-2r",
        "1/1 threads, 2s-4r",
        "1/1 threads, 4s-8r",
        "25/25 threads, 1s-2r",
        "25/25 threads, 2s-4r",
        "5/5 threads, 1s-2r",
        "5/5 threads, 2s-4r",
        "5/5 threads, 4s-8r",
        "8/8 threads, 4s-8r",
    ]
    assert unknown.rows == [] and unknown.other_configs == []
    assert unknown.note is not None
    first, lag = unknown.note.split("; ", 1)
    assert first == "mqperf-2021 has no rows for broker mqlab"
    assert lag.startswith("this run's senders fell up to 250 ms behind")
