"""The summary job's per-file and per-key functions, run without Spark."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from hdrh.histogram import HdrHistogram

from mqlab.results import hlog, runmeta
from mqlab.results.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run

from .conftest import summarize_locally

METRIC_FILES = {"send_call_us": "sender", "send_msg_us": "sender", "processing_us": "receiver"}


def merged_directly(
    run_dir: Path, metric: str, from_ms: int, to_ms: int | None = None
) -> HdrHistogram:
    """The reference: every measured interval decoded and added with hdrh itself."""
    h = HdrHistogram(1, 3_600_000_000, 3)
    for f in sorted((run_dir / "workers").glob(f"*/{metric}.hlog")):
        lines, _ = hlog.read_lines(str(f))
        assert lines is not None
        for item in hlog.parse_log(str(f), lines):
            if (
                isinstance(item, hlog.Interval)
                and item.start_ms >= from_ms
                and (to_ms is None or item.start_ms < to_ms)
            ):
                h.decode_and_add(item.payload.encode())
    return h


def test_percentiles_equal_merged_hdrh_histogram_exactly(synthetic_run: SyntheticRun) -> None:
    run = summarize_locally([synthetic_run.run_dir])[0]["runs"].to_pylist()[0]
    for metric in METRIC_FILES:
        h = merged_directly(synthetic_run.run_dir, metric, synthetic_run.warmup_end_ms)
        assert run[f"{metric}_count"] == h.get_total_count() > 0
        for name, p in hlog.PERCENTILES:
            assert run[f"{metric}_{name}"] == h.get_value_at_percentile(p), (metric, name)
        assert run[f"{metric}_max"] == h.get_max_value()


def test_window_percentiles_equal_merged_hdrh_per_window(synthetic_run: SyntheticRun) -> None:
    tbls = summarize_locally([synthetic_run.run_dir], window_s=10)[0]
    windows = tbls["windows"].to_pylist()
    assert [w["window_index"] for w in windows] == [0, 1, 2, 3]  # 30.6 s measured, 10 s windows
    for w in windows:
        h = merged_directly(
            synthetic_run.run_dir, "processing_us", w["window_start_ms"], w["window_end_ms"]
        )
        assert w["processing_us_p95"] == h.get_value_at_percentile(95.0)
        assert w["processing_us_count"] == h.get_total_count()


def test_percentiles_match_raw_samples_within_precision(synthetic_run: SyntheticRun) -> None:
    run = summarize_locally([synthetic_run.run_dir])[0]["runs"].to_pylist()[0]
    for metric, samples in synthetic_run.samples.items():
        raw = sorted(v for start, v in samples if start >= synthetic_run.warmup_end_ms)
        # each interval of each worker drew its own values: senders have 1 node here
        assert run[f"{metric}_count"] == len(raw)
        for name, p in hlog.PERCENTILES:
            rank = max(1, int(p * len(raw) / 100 + 0.5))
            exact = raw[rank - 1]
            got = run[f"{metric}_{name}"]
            # 3 significant digits: the bucket holding `exact` is < exact/1024 wide
            assert exact <= got <= exact + exact / 1024, (metric, name, exact, got)
        assert run[f"{metric}_max"] >= raw[-1] >= run[f"{metric}_max"] * (1 - 1 / 1024)


def test_delivery_is_merged_from_every_receiver(synthetic_run: SyntheticRun) -> None:
    tbls = summarize_locally([synthetic_run.run_dir])[0]
    run = tbls["runs"].to_pylist()[0]
    for k, v in synthetic_run.delivery.items():
        assert run[f"delivery_{k}"] == v, k
    per_sender = tbls["delivery"].to_pylist()
    assert sorted(r["sender_id"] for r in per_sender) == [0, 1, 2, 3, 4]
    assert all(r["lost"] == 2 and r["duplicated"] == 3 for r in per_sender)


def test_throughput_follows_the_archive_contract(synthetic_run: SyntheticRun) -> None:
    run = summarize_locally([synthetic_run.run_dir])[0]["runs"].to_pylist()[0]
    rows = list(
        csv.DictReader((synthetic_run.run_dir / "workers" / "sender-00" / "counts.csv").open())
    )
    measured = [r for r in rows if int(r["start_ms"]) >= synthetic_run.warmup_end_ms]
    n = sum(int(r["confirmed"]) for r in measured)
    last = max(
        int(r["start_ms"]) + int(r["length_ms"]) for r in measured if int(r["confirmed"]) > 0
    )
    expected = n / ((last - synthetic_run.warmup_end_ms) / 1000)
    assert run["send_msgs_per_s"] == round(expected, 3)
    assert run["send_mb_per_s"] == round(expected * 1024 / 1e6, 6)


def test_run_metadata_reads_scenario_workers_and_manifest(tmp_path: Path) -> None:
    spec = SyntheticSpec(
        sender_nodes=2,
        receiver_nodes=3,
        sender_threads=4,
        receiver_threads=6,
        message_bytes=100,
        batch=7,
        duration_s=3,
    )
    r = write_synthetic_run(tmp_path, spec)
    m = runmeta.read_run(r.run_dir)
    assert r.run_dir.name.endswith("_quickstart_nats-r3_4x6t-2s-3r")
    assert (m.broker, m.profile, m.scenario) == ("nats", "nats-r3", "quickstart")
    assert (m.sender_threads, m.receiver_threads, m.sender_nodes, m.receiver_nodes) == (4, 6, 2, 3)
    assert (m.message_bytes, m.batch) == (100, 7)
    tasks = runmeta.tasks_for(m, 60_000)
    assert len(tasks) == 2 * 4 + 3 * 4


def test_missing_worker_file_is_counted_and_the_rest_summarized(
    synthetic_run: SyntheticRun,
) -> None:
    (synthetic_run.run_dir / "workers" / "receiver-01" / "processing_us.hlog").unlink()
    with (synthetic_run.run_dir / "workers" / "sender-00" / "counts.csv").open("a") as f:
        f.write("1763806999000,1000,5\n")
    tbls = summarize_locally([synthetic_run.run_dir])[0]
    run = tbls["runs"].to_pylist()[0]
    assert (run["missing_files"], run["bad_lines"]) == (1, 1)
    problems = tbls["problems"].to_pylist()
    assert problems[0]["file"].endswith("receiver-01/processing_us.hlog")
    assert problems[1]["line"] is not None and problems[1]["file"].endswith("counts.csv")
    assert run["processing_us_count"] > 0 and run["send_msgs_per_s"] > 0


def test_run_redelivered_total_comes_from_receivers_worker_json(
    synthetic_run: SyntheticRun,
) -> None:
    """As summary.json counts it (the per-sender delivery.json value stays per sender)."""
    from mqlab.results.quick_summary import summarize_run

    path = synthetic_run.run_dir / "workers" / "receiver-01" / "worker.json"
    doc = json.loads(path.read_text())
    doc["messages"]["redelivered"] = 7
    path.write_text(json.dumps(doc))
    tbls = summarize_locally([synthetic_run.run_dir])[0]
    run = tbls["runs"].to_pylist()[0]
    assert run["delivery_redelivered"] == synthetic_run.delivery["redelivered"] + 7
    assert (
        run["delivery_redelivered"]
        == summarize_run(synthetic_run.run_dir)["delivery"]["redelivered"]
    )
    assert (
        sum(r["redelivered"] for r in tbls["delivery"].to_pylist())
        == (synthetic_run.delivery["redelivered"])
    )
