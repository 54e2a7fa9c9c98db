"""Every figure the summary prints, against an independent computation from the raw
files (``tests/fixtures/reference.py``): throughput and measured periods, window rates,
latency percentiles, the timeline, delivery, out-of-range counts; figures left unknown;
old archives."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hdrh.histogram import HdrHistogram

from mqlab.analysis.figures import figures
from mqlab.analysis.job import summarize_run
from mqlab.analysis.schema import DELIVERY
from mqlab.analysis.tables import as_summary
from mqlab.archive import layout
from mqlab.errors import ArchiveError
from tests.fixtures import reference
from tests.fixtures.summarized import summarize_locally
from tests.fixtures.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run

ROLES = (("sender", "send"), ("receiver", "receive"))


def _run(tbls: dict[str, pa.Table]) -> dict[str, Any]:
    row: dict[str, Any] = tbls["runs"].to_pylist()[0]
    return row


# -- throughput ---------------------------------------------------------------------------
def test_a_steady_1000_per_s_stream_summarizes_to_1000_when_the_warmup_ends_mid_second(
    tmp_path: Path,
) -> None:
    r = write_synthetic_run(
        tmp_path, SyntheticSpec(sender_threads=4, rate_per_thread=250, warmup_s=5, duration_s=30)
    )
    assert r.warmup_end_ms % 1000 == 750  # the first counted interval starts 250 ms later
    summary = summarize_run(r.run_dir)
    assert summary["throughput"]["send_msgs_per_s"] == pytest.approx(1000, rel=0.005)
    assert summary["throughput"]["receive_msgs_per_s"] == pytest.approx(1000, rel=0.005)
    # the old definition, counted messages / (end of the last interval that counted
    # something - warm-up end), is more than 0.5 % off on the same stream
    rows = [x for x in reference.counts(r.run_dir, "sender") if x["start_ms"] >= r.warmup_end_ms]
    n = sum(x["confirmed"] for x in rows)
    old_end = max(x["start_ms"] + x["length_ms"] for x in rows if x["confirmed"])
    assert abs(n / ((old_end - r.warmup_end_ms) / 1000) / 1000 - 1) > 0.005


def test_throughput_and_measured_periods_equal_raw_counts(edge_run: SyntheticRun) -> None:
    run = _run(summarize_locally([edge_run.run_dir])[0])
    summary = summarize_run(edge_run.run_dir)
    for role, name in ROLES:
        p = reference.period(edge_run.run_dir, role, edge_run.warmup_end_ms)
        assert p.start_ms > edge_run.warmup_end_ms  # the next whole second
        assert (run[f"{name}_start_ms"], run[f"{name}_end_ms"]) == (p.start_ms, p.end_ms)
        assert run[f"{name}_period_s"] == pytest.approx(p.seconds, abs=5e-4)
        assert run[f"{name}_msgs_per_s"] == pytest.approx(p.rate, abs=5e-4)
        assert run[f"{name}_mb_per_s"] == pytest.approx(p.rate * 1024 / 1e6, abs=1e-6)
        assert summary["throughput"][f"{name}_msgs_per_s"] == run[f"{name}_msgs_per_s"]
        assert summary["measured"][name]["period_s"] == run[f"{name}_period_s"]
    lags = [
        x["lag_ms"]
        for x in reference.counts(edge_run.run_dir, "sender")
        if x["start_ms"] >= edge_run.warmup_end_ms
    ]
    assert run["sender_lag_ms_max"] == max(lags) == 2250  # the 2.5 s stall, at 3 ticks
    assert summary["sender_lag_ms_max"] == 2250


def test_nothing_counted_gives_zero_throughput_and_no_period(tmp_path: Path) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(duration_s=2))
    summary = summarize_locally([r.run_dir], window_s=10)[0]
    run = _run(summary)
    assert run["send_msgs_per_s"] > 0
    for path in r.run_dir.glob("workers/receiver-*/counts.csv"):
        lines = path.read_text().splitlines()
        zeroed = [lines[0]] + [
            ",".join(f[:2] + ["0"] * (len(f) - 2)) for f in (x.split(",") for x in lines[1:])
        ]
        path.write_text("\n".join(zeroed) + "\n")
    run = _run(summarize_locally([r.run_dir], window_s=10)[0])
    assert run["receive_msgs_per_s"] == 0.0
    assert (run["receive_start_ms"], run["receive_end_ms"], run["receive_period_s"]) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize("window_s", [10.0, 7.0])
def test_window_rates_and_percentiles_equal_raw_files(
    edge_run: SyntheticRun, window_s: float
) -> None:
    window_ms = round(window_s * 1000)
    tbls = summarize_locally([edge_run.run_dir], window_s=window_s)[0]
    windows = tbls["windows"].to_pylist()
    expected = {
        role: reference.window_rates(edge_run.run_dir, role, edge_run.warmup_end_ms, window_ms)
        for role, _ in ROLES
    }
    assert [w["window_index"] for w in windows] == sorted(
        set(expected["sender"]) | set(expected["receiver"])
    )
    for w in windows:
        i = w["window_index"]
        assert w["window_start_ms"] == edge_run.warmup_end_ms + i * window_ms
        for role, name in ROLES:
            rate = expected[role].get(i)
            assert w[f"{name}_msgs_per_s"] == pytest.approx(rate or 0.0, abs=5e-4), (i, role)
        for metric in layout.METRICS:
            h = reference.merged(edge_run.run_dir, metric, w["window_start_ms"], w["window_end_ms"])
            want = reference.figures(h)
            assert {f: w[f"{metric}_{f}"] for f in want} == want, (i, metric)
    # the stall: a window with fewer messages, and none beyond the measured period
    rates = [w["send_msgs_per_s"] for w in windows]
    assert min(rates[:-1]) < max(rates)


# -- latency ------------------------------------------------------------------------------
def test_percentiles_equal_a_direct_hdrh_merge_of_the_measured_intervals(
    edge_run: SyntheticRun,
) -> None:
    tbls = summarize_locally([edge_run.run_dir])[0]
    summary = summarize_run(edge_run.run_dir)
    for metric in layout.METRICS:
        want = reference.figures(reference.merged(edge_run.run_dir, metric, edge_run.warmup_end_ms))
        assert want["count"] > 0
        assert summary["latency_us"][metric] == want, metric
        assert {f: _run(tbls)[f"{metric}_{f}"] for f in want} == want
    # the clamped out-of-range values are in the histograms (0 and the 1 h maximum)
    assert summary["latency_us"]["processing_us"]["max"] >= 3_600_000_000


def test_percentiles_match_raw_samples_within_precision(synthetic_run: SyntheticRun) -> None:
    lat = summarize_run(synthetic_run.run_dir)["latency_us"]
    for metric, samples in synthetic_run.samples.items():
        raw = sorted(v for start, v in samples if start >= synthetic_run.warmup_end_ms)
        assert lat[metric]["count"] == len(raw)
        if not raw:
            continue
        for name, p in reference.PERCENTILES.items():
            exact = raw[max(1, int(p * len(raw) / 100 + 0.5)) - 1]
            # 3 significant digits: the bucket holding `exact` is < exact/1024 wide
            assert exact <= lat[metric][name] <= exact + exact / 1024, (metric, name)
        assert lat[metric]["max"] >= raw[-1] >= lat[metric]["max"] * (1 - 1 / 1024)


def test_figures_of_an_empty_histogram_are_zero() -> None:
    figs = figures(reference.empty())
    assert figs["count"] == 0 and figs["p99_9999"] == 0 and figs["max"] == 0
    assert figs == figures(None)


def test_out_of_range_counts_come_from_worker_json(edge_run: SyntheticRun) -> None:
    summary = summarize_run(edge_run.run_dir)
    for metric in layout.METRICS:
        want = reference.out_of_range(edge_run.run_dir, metric)
        assert summary["latency_out_of_range"][metric] == want, metric
    assert summary["latency_out_of_range"]["processing_us"] == {"below_zero": 4, "above_max": 2}
    assert summary["latency_out_of_range"]["send_msg_us"] == {"below_zero": 2, "above_max": 0}


def test_out_of_range_counts_are_unknown_without_worker_json(tmp_path: Path) -> None:
    r = write_synthetic_run(
        tmp_path, SyntheticSpec(omit=("workers/receiver-01/worker.json",), duration_s=5)
    )
    summary = summarize_run(r.run_dir)
    assert summary["latency_out_of_range"]["processing_us"]["below_zero"] is None
    assert summary["latency_out_of_range"]["send_msg_us"]["below_zero"] == 0
    assert "worker.json" in summary["unknown"]["processing_us_below_zero"]
    assert summary["status"] == "partial"


# -- timeline -----------------------------------------------------------------------------
def test_timeline_equals_raw_counts_and_per_second_histograms(edge_run: SyntheticRun) -> None:
    rows = summarize_locally([edge_run.run_dir])[0]["timeline"].to_pylist()
    want = reference.timeline(edge_run.run_dir)
    assert [r["second_ms"] for r in rows] == [w["second_ms"] for w in want]
    for got, w in zip(rows, want, strict=True):
        assert {k: got[k] for k in w} == w, w["second_ms"]
    backlog = [r["backlog"] for r in rows]
    assert max(backlog) > 0  # deliveries follow sends by 250 ms
    truth = edge_run.delivery
    assert backlog[-1] == truth["confirmed"] - truth["received"] - 2 * 5  # foreign are received
    stalled = [r for r in rows if r["sender_lag_ms"] > 0]
    assert [r["sender_lag_ms"] for r in stalled] == [250, 1250, 2250]
    assert all(r["confirmed"] == 0 for r in stalled[1:])
    assert sum(r["unsent"] for r in rows) == truth["unsent"]
    # repeats: every delivery of a seq its receiver node had had before, and nothing else
    # (delivery.json's received counts no foreign messages; counts.csv's does)
    repeats = truth["received"] - truth["first_received"]
    assert sum(r["repeats"] for r in rows) == repeats == 3 * 6  # the redeliveries


# -- delivery -----------------------------------------------------------------------------
def test_delivery_figures_equal_raw_records(edge_run: SyntheticRun) -> None:
    tbls = summarize_locally([edge_run.run_dir])[0]
    summary = summarize_run(edge_run.run_dir)
    totals, per_sender = reference.delivery(edge_run.run_dir)
    assert summary["delivery"] == totals
    assert totals == edge_run.delivery  # and both are what the fixture generated
    assert summary["unknown"] == {} and summary["status"] == "complete"
    n = 6  # sender ids
    assert totals["lost"] == 2 * n and totals["undrained"] == 3 * n + 1
    assert totals["duplicated"] == (3 + 2) * n  # redelivered + delivered to two nodes
    assert totals["first_received"] == totals["unique_received"] + 2 * n
    assert totals["reordered"] == 4 * 2 and totals["redelivered"] == 3 * n
    assert totals["foreign"] == 5 * 2 + 1  # on the receivers + still in the broker
    assert totals["failed"] == 2 * n and totals["unsent"] == 3 * n
    # Jepsen's total-queue figures: 1 failed send per sender arrived anyway, 2 seqs per
    # sender arrived that were never sent; each also as a share of the attempts
    assert totals["recovered"] == 1 * n and totals["unexpected"] == 2 * n
    share = summary["delivery_fractions"]
    for k in ("lost", "unexpected", "duplicated", "recovered"):
        assert share[k] == pytest.approx(totals[k] / totals["sent"], rel=1e-12), k
    rows = {r["sender_id"]: r for r in tbls["delivery"].to_pylist()}
    assert sorted(rows) == sorted(per_sender)
    for sid, want in per_sender.items():
        assert {k: rows[sid][k] for k in want} == want, sid


def test_lost_counts_seqs_still_in_the_broker_as_not_lost(tmp_path: Path) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(undrained_per_sender=4, duration_s=5))
    summary = summarize_run(r.run_dir)
    assert summary["delivery"]["lost"] == 0 and summary["delivery"]["undrained"] == 4 * 5
    assert summary["unknown"] == {}
    (r.run_dir / "workers" / "receiver-00" / "delivery.json").unlink()
    assert summarize_run(r.run_dir)["delivery"]["lost"] is None


def test_unidentified_messages_left_in_the_broker_leave_lost_known_when_all_were_received(
    tmp_path: Path,
) -> None:
    """The broker holds messages it cannot say which (RocketMQ's count), but every
    confirmed message was received: none can be lost, whatever is left there."""
    r = write_synthetic_run(
        tmp_path, SyntheticSpec(undrained="unidentified", undrained_foreign=7, duration_s=5)
    )
    summary = summarize_run(r.run_dir)
    totals, per_sender = reference.delivery(r.run_dir)
    assert "lost" not in summary["unknown"], summary["unknown"]
    assert summary["delivery"]["lost"] == totals["lost"] == 0
    assert summary["delivery"]["undrained"] == totals["undrained"] == 7
    assert summary["delivery"]["confirmed"] == totals["confirmed"] > 0


@pytest.mark.parametrize(
    ("spec", "null", "why"),
    [
        (
            SyntheticSpec(undrained="unidentified", undrained_per_sender=2),
            {"lost"},
            "could not be identified",
        ),
        (SyntheticSpec(undrained="error"), {"lost", "undrained"}, "could not be asked"),
        (
            SyntheticSpec(undrained="missing"),
            {"lost", "undrained", "foreign"},
            "undrained.json missing",
        ),
        (
            SyntheticSpec(omit=("workers/sender-00/sent.json",)),
            {"lost", "sent", "confirmed", "failed", "unsent", "recovered", "unexpected"},
            "sent.json of sender-00 missing",
        ),
        (
            SyntheticSpec(omit=("workers/receiver-01/delivery.json",)),
            {
                "lost",
                "received",
                "first_received",
                "unique_received",
                "duplicated",
                "redelivered",
                "reordered",
                "foreign",
                "recovered",
                "unexpected",
            },
            "delivery.json of receiver-01 missing",
        ),
    ],
    ids=["unidentified", "broker-error", "no-undrained", "no-sent", "no-delivery"],
)
def test_figures_depending_on_missing_data_are_null_and_say_why(
    tmp_path: Path, spec: SyntheticSpec, null: set[str], why: str
) -> None:
    spec = SyntheticSpec(**{**spec.__dict__, "duration_s": 5.0, "lost_per_sender": 1})
    r = write_synthetic_run(tmp_path, spec)
    summary = summarize_run(r.run_dir)
    nulls = {k for k, v in summary["delivery"].items() if v is None}
    assert nulls == null
    assert set(summary["unknown"]) == null
    assert why in summary["unknown"]["lost"]
    assert summary["status"] == "partial"
    # the rest is still summarized
    assert summary["throughput"]["send_msgs_per_s"] > 0
    assert summary["latency_us"]["processing_us"]["count"] > 0
    run = _run(summarize_locally([r.run_dir])[0])
    assert json.loads(run["unknown"]) == summary["unknown"]
    assert as_summary(run)["delivery"] == summary["delivery"]
    for k in set(DELIVERY) - null:
        assert summary["delivery"][k] is not None


def test_an_unidentified_empty_broker_leaves_lost_known(tmp_path: Path) -> None:
    r = write_synthetic_run(
        tmp_path, SyntheticSpec(undrained="unidentified", lost_per_sender=2, duration_s=5)
    )
    summary = summarize_run(r.run_dir)
    assert summary["delivery"]["lost"] == 2 * 5 and summary["delivery"]["undrained"] == 0
    assert summary["unknown"] == {}


# -- old archives -------------------------------------------------------------------------
def test_a_format_version_1_archive_is_refused_with_one_line_that_says_what_to_do(
    tmp_path: Path,
) -> None:
    r = write_synthetic_run(tmp_path, SyntheticSpec(duration_s=3))
    manifest = r.run_dir / layout.MANIFEST
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format_version": 1}))
    with pytest.raises(ArchiveError) as err:
        summarize_run(r.run_dir)
    text = str(err.value)
    assert "\n" not in text
    assert str(manifest) in text and "format_version 1" in text
    assert "mqlab run" in text and "summarize" in text  # re-run, or summarize with 0.1


def test_figures_equal_hdrh_on_random_histograms() -> None:
    rng = random.Random(7)
    for _ in range(25):  # hdrh's own mean walks every value: slow
        h = reference.empty()
        for _ in range(rng.choice([1, 2, 10, 500])):
            v = rng.choice([0, 1, 3_600_000_000, int(rng.lognormvariate(rng.uniform(1, 15), 2))])
            h.record_value(min(v, 3_600_000_000), rng.choice([1, 1, 9, 1000]))
        for hist in (h, HdrHistogram.decode(h.encode())):
            assert figures(hist) == reference.figures(hist)
    assert figures(h, ("p99", "count")) == {"p99": figures(h)["p99"], "count": figures(h)["count"]}
