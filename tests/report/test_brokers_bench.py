# ruff: noqa: E501 - the table copied from the report keeps one block per line
"""The brokers-bench set: its rows as the report prints them (figures read off the report
by hand below), and its blocks: a run's row first, then the published rows of its broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqlab.published import brokers_bench
from mqlab.published import sets as published_sets

# (experiment, system, variant) -> (msgs/s, "Mb/sec", min, p90, p99, p99.9, max), copied by
# hand from the report (seconds written as ms); None where the block prints nothing
BY_HAND: dict[tuple[str, str, str], tuple[float | None, ...]] = {
    ("ordered-stream", "Kafka", ""): (594.53, 0.072575, 0, 1.838, 3.06, None, 21.929),
    ("ordered-stream", "Redpanda", ""): (1395.50, 0.170350, 0, 10.013, 10.985, None, 16.786),
    ("ordered-stream", "NATS JetStream", ""): (1230.48, 0.150206, 0, 1.019, 3.53, None, 8.987),
    ("ordered-stream", "Pulsar", ""): (92.56, 0.011299, 0, 19.376075, 32.94208, None, 513.493147),
    ("ten-topics-acks-all", "Redpanda", ""): (2949.83, 2.880691, 0.613, 12.929, 17.362, 29.048, None),
    ("ten-topics-acks-all", "Kafka", ""): (1477.08, 1.442457, 1.583, 11.287, 27.341, 49.532, None),
    ("ten-topics-acks-none", "Kafka", ""): (7463.01, 7.288099, 1.612, 3108.43, 6866.796, 8339.648, None),
    ("ten-topics-acks-none", "Redpanda", ""): (36776.07, 35.914130, 18.364, 7302.656, 10989.88, 11505.453, None),
    ("ten-topics-acks-leader", "Kafka", ""): (2856.32, 2.789373, 1.649, 18.452, 52.439, 115.218, None),
    ("ten-topics-acks-leader", "Redpanda", ""): (5434.38, 5.307011, 0.409, 13.113, 18.431, 24.214, None),
    ("compression-1kb", "Redpanda", "none"): (None, 4.289471, 0, 12, 16, 20, 32),
    ("compression-1kb", "Redpanda", "gzip"): (4408.45, 4.305127, 0, 12, 16, 19, 27),
    ("compression-1kb", "Redpanda", "snappy"): (4482.91, 4.377841, 0, 12, 16, 20, 30),
    ("compression-10kb", "Redpanda", "none"): (4122.12, 40.255121, 0, 11, 15, 19, 30),
    ("compression-10kb", "Redpanda", "gzip"): (4196.52, 40.981668, 0, 11, 16, 20, 47),
    ("compression-10kb", "Redpanda", "snappy"): (4372.22, 42.697422, 0, 12, 15, 19, 30),
    ("producers-1-topic", "Redpanda", ""): (5343.15, 5.217921, 0, 10, 13, 16, 22),
    ("producers-1-topic", "Kafka", ""): (4372.17, 4.269692, 0, 6, 11, 20, 38),
    ("producers-4-topics", "Redpanda", "franz-go"): (9933.75, 9.700924, 0, 15, 23, 29, 46),
    ("producers-4-topics", "Redpanda", "kafka-go"): (7687.55, 7.507369, 0, 18, 26, 34, 63),
    ("producers-4-topics", "Kafka", "franz-go"): (7147.80, 6.980273, 0, 56, 108, 160, 241),
    ("producers-4-topics", "Kafka", "kafka-go"): (6496.36, 6.344100, 1, 18, 28, 42, 127),
    ("producers-10-topics", "Redpanda", ""): (11525.34, 11.255215, 0, 37, 55, 71, 101),
    ("producers-10-topics", "Kafka", ""): (8487.30, 8.288379, 1, 120, 216, 319, 506),
    ("producers-10-topics", "NATS JetStream", ""): (7971.84, 7.784997, 0, 27, 61, 89, 124),
    ("producers-10-topics-10-partitions", "Redpanda", ""): (11882.75, 11.604249, 1, 73, 116, 141, 179),
    ("producers-10-topics-10-partitions", "Kafka", ""): (7161.17, 6.993326, 2, 145, 248, 343, 742),
    ("vertical-10-cores", "Kafka", ""): (21539.27, 21.034442, 1, 11, 20, 36, 127),
    ("vertical-10-cores", "Redpanda", ""): (20974.61, 20.483016, 0, 13, 19, 35, 60),
    ("vertical-10-cores", "NATS JetStream", ""): (16148.69, 15.770207, 0, 8, 15, 28, 58),
}  # fmt: skip


def _key(r: brokers_bench.Row) -> tuple[str, str, str]:
    if r.experiment.startswith("compression"):
        variant = r.compression
    elif r.experiment == "producers-4-topics":
        variant = r.client_driver
    else:
        variant = ""
    return (r.experiment, r.system, variant)


def test_every_published_block_is_one_row_with_the_reports_figures() -> None:
    rows = brokers_bench.load()
    got = {
        _key(r): (r.msgs_per_s, r.mib_per_s, r.min_ms, r.p90_ms, r.p99_ms, r.p999_ms, r.max_ms)
        for r in rows
    }
    assert len(rows) == len(got) == len(BY_HAND) == 30
    assert got == BY_HAND


def test_message_bytes_are_data_over_message_throughput_in_mib() -> None:
    for r in brokers_bench.load():
        assert r.message_bytes in (128, 1024, 10240)
        if r.msgs_per_s is not None:
            assert r.mib_per_s * 2**20 / r.msgs_per_s == pytest.approx(r.message_bytes, abs=0.05)
    ordered = [r for r in brokers_bench.load() if r.experiment == "ordered-stream"]
    assert {r.message_bytes for r in ordered} == {128}
    assert {r.broker for r in ordered} == {"kafka", "redpanda", "nats", "pulsar"}


def test_setups_as_the_report_states_them() -> None:
    rows = {_key(r): r for r in brokers_bench.load()}
    pulsar = rows[("ordered-stream", "Pulsar", "")]
    assert pulsar.hardware == "EC2 i3.large" and pulsar.acks == "all"
    assert (pulsar.topics, pulsar.partitions_per_topic, pulsar.producers, pulsar.consumers) == (
        1,
        1,
        1,
        1,
    )
    ten = rows[("ten-topics-acks-none", "Redpanda", "")]
    assert (ten.topics, ten.producers, ten.consumers, ten.acks) == (10, 10, 10, "none")
    assert ten.messages_per_producer == 100_000
    p10 = rows[("producers-10-topics-10-partitions", "Kafka", "")]
    assert (p10.topics, p10.partitions_per_topic, p10.producers, p10.consumers) == (10, 10, 100, 10)
    assert p10.duration_s == pytest.approx(300.349696209)
    assert rows[("vertical-10-cores", "NATS JetStream", "")].hardware == "Docker VM 10 cores 24 GB"
    assert rows[("compression-1kb", "Redpanda", "gzip")].hardware == "Docker VM 2 cores 24 GB"


def test_the_set_is_registered_with_its_experiments() -> None:
    assert "brokers-bench" in published_sets.names()
    assert published_sets.get("brokers-bench").experiments() == {k[0] for k in BY_HAND}


def _run(broker: str = "kafka", **kw: Any) -> dict[str, Any]:
    run = {
        "run_id": "2026-11-23T04-00-00Z_bb_kafka-standin-1p_1t-1s-1r",
        "run_dir": "/nonexistent",
        "broker": broker,
        "profile": "kafka-standin-1p",
        "sender_threads": 1,
        "receiver_threads": 1,
        "sender_nodes": 1,
        "receiver_nodes": 1,
        "sender_processes": 1,
        "receiver_processes": 1,
        "queues": 1,
        "message_bytes": 128,
        "batch": 1,
        "receive_msgs_per_s": 1310.0,
        "receive_mb_per_s": 1310.0 * 128 / 1e6,
        "processing_us_p90": 1838,
        "processing_us_p99": 3060,
        "processing_us_p99_9": 12500,
        "processing_us_max": 21929,
        "host_cpu_model": "AMD EPYC",
        "cluster_target": "local",
        "stand_in": "tansu, a Kafka API stand-in",
    }
    return {**run, **kw}


def test_a_block_puts_the_run_first_then_its_brokers_published_rows() -> None:
    (block,) = published_sets.get("brokers-bench").blocks([_run()], "ordered-stream")
    assert block.headers == ("source", "msgs/s", "MiB/s", "p90 ms", "p99 ms", "p99.9 ms", "max ms")
    mib = "0.16"  # 1310 x 128 / 2^20 = 0.1599: three decimals, trailing zero dropped
    assert block.rows == [
        ("mqlab (measured period)", 1310.0, mib, "1.838", "3.06", "12.5", "21.929"),
        ("brokers-bench Kafka", 594.53, "0.073", "1.838", "3.06", "-", "21.929"),
    ]
    notes = " ".join(block.notes)
    assert "processing latency" in notes and "producer-to-consumer" in notes
    assert "MBP M2 32 GB" in notes and "waited for: all" in notes
    assert "STAND-IN" in notes  # base.measurement_notes
    assert "128 B (derived" in notes


def test_rows_of_other_variants_of_the_experiment_all_come_along() -> None:
    (block,) = published_sets.get("brokers-bench").blocks([_run("redpanda")], "producers-4-topics")
    assert [r[0] for r in block.rows] == [
        "mqlab (measured period)",
        "brokers-bench Redpanda (franz-go)",
        "brokers-bench Redpanda (kafka-go)",
    ]


def test_without_an_experiment_the_runs_archived_reference_decides(tmp_path: Path) -> None:
    (tmp_path / "scenario.toml").write_text(
        '[reference]\nset = "brokers-bench"\nexperiment = "ten-topics-acks-leader"\n'
    )
    blocks = published_sets.get("brokers-bench").blocks([_run(run_dir=str(tmp_path))], None)
    assert [b.title.rsplit(" vs ", 1)[1] for b in blocks] == ["ten-topics-acks-leader"]
    assert [r[0] for r in blocks[0].rows][1:] == ["brokers-bench Kafka"]


def test_without_any_reference_every_experiment_of_the_broker() -> None:
    blocks = published_sets.get("brokers-bench").blocks([_run("nats")], None)
    assert [b.title.rsplit(" vs ", 1)[1] for b in blocks] == [
        "ordered-stream",
        "producers-10-topics",
        "vertical-10-cores",
    ]
    none = published_sets.get("brokers-bench").blocks([_run("postgres")], None)
    assert len(none) == 1 and "no rows for broker postgres" in none[0].notes[0]


def test_an_experiment_without_the_runs_broker_says_so() -> None:
    (block,) = published_sets.get("brokers-bench").blocks([_run("nats")], "compression-1kb")
    assert len(block.rows) == 1
    assert any("no row for broker nats (published: Redpanda)" in n for n in block.notes)
