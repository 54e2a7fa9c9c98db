"""The published sets beside mqperf 2021: mqperf 2015 (mqlab/published/data/mqperf-2015.csv) and
Tyler Treat's commit-log latencies (treat-commit-logs.csv). Expected values are read off
the articles by hand; blocks put a run beside the rows of its broker, nodes and threads
(2015) or message size (Treat)."""

from __future__ import annotations

from typing import Any

import pytest

from mqlab.published import mqperf2015, treat
from mqlab.published import sets as published_sets


def run(broker: str, threads: int, sn: int, rn: int, **extra: Any) -> dict[str, Any]:
    row = {
        "run_id": "r1",
        "broker": broker,
        "sender_threads": threads,
        "receiver_threads": threads,
        "sender_processes": 1,
        "receiver_processes": 1,
        "sender_nodes": sn,
        "receiver_nodes": rn,
        "send_msgs_per_s": 100.0,
        "receive_msgs_per_s": 90.0,
        "batch": 10,
        "message_bytes": 1024,
        "processing_us_p99": 1500,
        "processing_us_p99_9": 2500,
        "processing_us_p99_99": 3500,
        "processing_us_p99_9999": 4500,
        "sender_lag_ms_max": 0,
    }
    row.update(extra)
    return row


def test_both_sets_are_registered_beside_mqperf_2021() -> None:
    assert {"mqperf-2015", "mqperf-2021", "treat-commit-logs"} <= set(published_sets.names())


def test_mqperf_2015_holds_every_published_table_and_row() -> None:
    rows = mqperf2015.load_rows()
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.table] = counts.get(r.table, 0) + 1
    assert counts == {
        "mongodb-async": 8,
        "mongodb-sync": 9,
        "sqs": 3,
        "rabbitmq": 3,
        "rabbitmq-batches": 5,
        "hornetq": 9,
        "activemq": 2,
        "activemq-sync-modes": 6,
        "kafka-async": 9,
        "kafka-sync": 9,
    }
    assert published_sets.get("mqperf-2015").experiments() == set(counts)
    by = {(r.table, r.engine, r.nodes, r.threads, r.send_batch_max): r for r in rows}
    # read off the article: MongoDB async, mmap, 5 threads, 1 node: 10 687 sent, 2 761 received
    m = by[("mongodb-async", "mmap", 1, 5, 10)]
    assert (m.send_msgs_per_s, m.receive_msgs_per_s) == (10687, 2761)
    # MongoDB sync, wired tiger, 25 threads, 1 node: 3 777 / 422
    w = by[("mongodb-sync", "wiredtiger", 1, 25, 10)]
    assert (w.send_msgs_per_s, w.receive_msgs_per_s) == (3777, 422)
    # RabbitMQ, 4 nodes, 5 threads, batches up to 1000: 2 897 / 2 695
    b = by[("rabbitmq-batches", "", 4, 5, 1000)]
    assert (b.send_msgs_per_s, b.receive_msgs_per_s) == (2897, 2695)
    # HornetQ, 4 nodes, 25 threads: 17 402 / 17 160
    h = by[("hornetq", "", 4, 25, 10)]
    assert (h.send_msgs_per_s, h.receive_msgs_per_s) == (17402, 17160)
    # Kafka sync, 2 nodes, 25 threads: 10 645 / 10 267; async 4 nodes 25 threads: 31 859 / 28 205
    assert by[("kafka-sync", "", 2, 25, 10)].send_msgs_per_s == 10645
    assert by[("kafka-sync", "", 2, 25, 10)].receive_msgs_per_s == 10267
    assert by[("kafka-async", "", 4, 25, 10)].send_msgs_per_s == 31859
    # ActiveMQ local_mem, 4 nodes, 5 threads: 6 951 / 6 875
    assert [
        (r.send_msgs_per_s, r.receive_msgs_per_s) for r in rows if r.replication == "local_mem"
    ] == [(6951, 6875)]
    # SQS, from the text: 405 / 405 on one thread; 8 nodes 109 460 / 41 000, threads unsaid
    sqs = [r for r in rows if r.system == "SQS"]
    assert (sqs[0].threads, sqs[0].send_msgs_per_s) == (1, 405)
    assert (sqs[2].nodes, sqs[2].threads, sqs[2].send_msgs_per_s) == (8, None, 109460)


def test_mqperf_2015_maps_hornetq_to_artemis_approximately_and_activemq_to_nothing() -> None:
    m = mqperf2015.SYSTEM_TO_BROKER
    assert {s: b for s, (b, _) in m.items()} == {
        "SQS": "sqs",
        "MongoDB": "mongodb",
        "RabbitMQ": "rabbitmq",
        "Kafka": "kafka",
        "HornetQ": "artemis",
        "ActiveMQ": None,
    }
    assert m["HornetQ"][1] and "HornetQ" in m["HornetQ"][1]
    assert m["SQS"][1] is None and m["MongoDB"][1] is None


def test_a_2015_block_puts_a_run_beside_its_nodes_and_threads() -> None:
    (block,) = published_sets.get("mqperf-2015").blocks([run("kafka", 25, 2, 2)], None)
    assert block.rows[0] == ("mqlab (measured period)", "batch <= 10", 100.0, 90.0)
    assert block.rows[1:] == [
        ("mqperf-2015 Kafka (kafka-async)", "async", 26892.0, 24310.0),
        ("mqperf-2015 Kafka (kafka-sync)", "sync", 10645.0, 10267.0),
    ]
    (only_sync,) = published_sets.get("mqperf-2015").blocks([run("kafka", 25, 2, 2)], "kafka-sync")
    assert [r[0] for r in only_sync.rows[1:]] == ["mqperf-2015 Kafka (kafka-sync)"]
    (hornet,) = published_sets.get("mqperf-2015").blocks([run("artemis", 1, 1, 1)], "hornetq")
    assert hornet.rows[1][2:] == (1108.0, 1106.0)
    assert any("HornetQ" in n for n in hornet.notes)


def test_a_2015_block_without_a_row_says_why() -> None:
    (block,) = published_sets.get("mqperf-2015").blocks([run("kafka", 5, 1, 2)], None)
    assert len(block.rows) == 1
    assert any("as many sender as receiver nodes" in n for n in block.notes)
    (standin,) = published_sets.get("mqperf-2015").blocks(
        [run("mongodb", 1, 1, 1, stand_in="mongoeco")], "mongodb-sync"
    )
    assert [r[2:] for r in standin.rows[1:]] == [(1952.0, 1630.0), (1531.0, 1239.0)]
    assert any(n.startswith("STAND-IN") for n in standin.notes)


def test_treat_commit_logs_holds_the_four_tables_as_published() -> None:
    rows = treat.load_rows()
    assert len(rows) == 16
    by = {(r.experiment, r.message_bytes): r.percentiles_ms for r in rows}
    # read off the post: NATS Streaming file-backed, 5KB: 22.1692 35.7394 40.5612 (x3)
    assert by[("nats-streaming-file", 5120)] == (22.1692, 35.7394, 40.5612, 40.5612, 40.5612)
    # in memory, 1KB: 0.38064 0.8321 1.3260
    assert by[("nats-streaming-memory", 1024)][:3] == (0.38064, 0.8321, 1.3260)
    # --file_sync=false, 1MB: 1296.1464 ...; Kafka RF 1, 1KB: 0.5942 1.3123 17.6556
    assert by[("nats-streaming-file-nosync", 1_048_576)][0] == 1296.1464
    assert by[("kafka-rf1", 1024)][:3] == (0.5942, 1.3123, 17.6556)
    assert published_sets.get("treat-commit-logs").experiments() == {
        "nats-streaming-memory",
        "nats-streaming-file",
        "nats-streaming-file-nosync",
        "kafka-rf1",
    }


@pytest.mark.parametrize(("size", "published_size"), [(256, 256), (1_000_000, 1_048_576)])
def test_a_treat_block_matches_the_message_size(size: int, published_size: int) -> None:
    (block,) = published_sets.get("treat-commit-logs").blocks(
        [run("nats", 1, 1, 1, message_bytes=size)], "nats-streaming-file"
    )
    assert block.rows[0] == (
        "mqlab processing latency (measured period)",
        size,
        1.5,
        2.5,
        3.5,
        None,
        4.5,
    )
    assert len(block.rows) == 2 and block.rows[1][1] == published_size
    assert any("approximate: NATS Streaming" in n for n in block.notes)


def test_a_treat_block_says_latency_counts_from_the_intended_time_as_the_post() -> None:
    (block,) = published_sets.get("treat-commit-logs").blocks(
        [run("nats", 1, 1, 1, sender_lag_ms_max=16)], None
    )
    lag = [n for n in block.notes if "behind" in n]
    assert lag == [
        "this run's senders fell up to 16 ms behind their fixed-rate schedule; its latencies "
        "count from each message's intended send time, as the post's corrected ones do"
    ]
    assert len(block.rows) == 1 + 3  # the 1 KB row of each of the three NATS Streaming tables


def test_treat_commit_logs_holds_the_whole_kafka_table_as_published() -> None:
    by = {(r.experiment, r.message_bytes): r.percentiles_ms for r in treat.load_rows()}
    # read off the post by hand, "Kafka (replication factor 1)", 99% .. 99.9999%:
    # 256B 0.9230 1.4575 1.6596 (x3); 1KB 0.5942 1.3123 17.6556 (x3);
    # 5KB 0.7203 5.7236 18.9334 (x3); 1MB 5337.3174 5597.3315 5617.3199 (x3)
    assert by[("kafka-rf1", 256)] == (0.9230, 1.4575, 1.6596, 1.6596, 1.6596)
    assert by[("kafka-rf1", 1024)] == (0.5942, 1.3123, 17.6556, 17.6556, 17.6556)
    assert by[("kafka-rf1", 5120)] == (0.7203, 5.7236, 18.9334, 18.9334, 18.9334)
    assert by[("kafka-rf1", 1_048_576)] == (5337.3174, 5597.3315, 5617.3199, 5617.3199, 5617.3199)
    assert {r.system for r in treat.load_rows() if r.experiment == "kafka-rf1"} == {"Kafka"}


def test_a_kafka_run_meets_the_posts_kafka_row_of_its_size() -> None:
    (block,) = published_sets.get("treat-commit-logs").blocks(
        [run("kafka", 1, 1, 1, message_bytes=5120)], "kafka-rf1"
    )
    assert block.rows[1] == (
        "treat-commit-logs Kafka (kafka-rf1)",
        5120,
        0.7203,
        5.7236,
        18.9334,
        18.9334,
        18.9334,
    )
    assert any("approximate: Kafka of 2016" in n for n in block.notes)
