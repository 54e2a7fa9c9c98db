"""The published experiments as scenarios (scenarios/seeds/): each AWS-sized file sweeps
exactly the published rows of its system (computed here from the reference CSVs), on the
article's hardware; each local file is the first rows of its table, small."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from mqlab.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "scenarios" / "seeds"
REFERENCE = ROOT / "mqlab" / "reference"

# mqperf 2021 system (the CSV's) -> the files reproducing its tables
FILES_2021 = {
    ("MongoDB", "main"): "mongodb",
    ("PostgreSQL", "main"): "postgres",
    ("Event Store", "main"): "eventstore",
    ("SQS", "main"): "sqs",
    ("RabbitMQ", "main"): "rabbitmq",
    ("ActiveMQ Artemis", "main"): "artemis",
    ("NATS Streaming", "main"): "nats",
    ("Redis Streams", "main"): "redis",
    ("Pulsar", "1-partition"): "pulsar-1-partition",
    ("Pulsar", "4-partitions"): "pulsar-4-partitions",
    ("RocketMQ", "main"): "rocketmq",
    ("Kafka", "main"): "kafka",
    ("RedPanda", "main"): "redpanda",
}
BROKER_2021 = {
    "mongodb": "mongodb",
    "postgres": "postgres",
    "eventstore": "eventstore",
    "sqs": "sqs",
    "rabbitmq": "rabbitmq",
    "artemis": "artemis",
    "nats": "nats",
    "redis": "redis",
    "pulsar-1-partition": "pulsar",
    "pulsar-4-partitions": "pulsar",
    "rocketmq": "rocketmq",
    "kafka": "kafka",
    "redpanda": "redpanda",
}
LOCAL_2021 = {"mongodb", "postgres", "sqs", "rabbitmq", "artemis", "nats", "redis"} | {
    "pulsar-1-partition",
    "kafka",
    "redpanda",
}


def _csv(name: str) -> list[dict[str, str]]:
    with (REFERENCE / name).open(newline="") as f:
        return list(csv.DictReader(f))


def _grid(runs: list[Scenario]) -> list[tuple[int, int, int, int]]:
    """(sender threads, receiver threads, sender nodes, receiver nodes) per node, in order."""
    out = []
    for s in runs:
        c = s.clients
        p = c.processes_per_node or 1
        out.append((p * c.sender_threads, p * c.receiver_threads, c.sender_nodes, c.receiver_nodes))
    return out


def _published_2021(system: str, table: str) -> list[tuple[int, int, int, int]]:
    return [
        (
            int(r["sender_threads"]),
            int(r["receiver_threads"]),
            int(r["sender_nodes"]),
            int(r["receiver_nodes"]),
        )
        for r in _csv("mqperf-2021.csv")
        if r["system"] == system and r["table"] == table
    ]


def test_every_2021_table_has_its_aws_file_and_no_other_file_is_there() -> None:
    tables = {(r["system"], r["table"]) for r in _csv("mqperf-2021.csv")}
    assert tables == set(FILES_2021)
    assert {p.stem for p in (SEEDS / "mqperf-2021" / "aws").glob("*.toml")} == set(
        FILES_2021.values()
    )
    assert {p.stem for p in (SEEDS / "mqperf-2021" / "local").glob("*.toml")} == LOCAL_2021


@pytest.mark.parametrize(("system", "table"), sorted(FILES_2021))
def test_each_2021_aws_file_sweeps_exactly_the_published_rows(system: str, table: str) -> None:
    stem = FILES_2021[(system, table)]
    runs = load_scenario(SEEDS / "mqperf-2021" / "aws" / f"{stem}.toml")
    published = _published_2021(system, table)
    assert _grid(runs) == published  # the same rows, in the article's order
    for s in runs:
        assert s.broker == BROKER_2021[stem]
        assert s.clients.processes_per_node == 1  # mqperf's threads are per node
        assert s.cluster.target == "aws" and s.cluster.nodes == 3
        assert s.cluster.aws is not None
        assert s.cluster.aws.broker_instance_type == "r5.2xlarge"
        assert s.cluster.aws.client_instance_type == "r5.2xlarge"
        assert s.cluster.aws.availability_zones == 1
        assert (s.workload.send_batch_min, s.workload.send_batch_max) == (1, 10)
        assert s.workload.receive_batch_max == 10
        assert s.reference is not None
        assert (s.reference.set, s.reference.experiment) == ("mqperf-2021", table)
        assert "standin" not in s.profile.name


@pytest.mark.parametrize("stem", sorted(LOCAL_2021))
def test_each_2021_local_file_is_the_first_two_rows_small(stem: str) -> None:
    system, table = next(k for k, v in FILES_2021.items() if v == stem)
    runs = load_scenario(SEEDS / "mqperf-2021" / "local" / f"{stem}.toml")
    assert _grid(runs) == _published_2021(system, table)[:2]
    for s in runs:
        assert s.cluster.target == "local"
        assert s.clients.processes_per_node == 1
        assert s.workload.duration_s is not None and s.workload.duration_s <= 5
        assert s.reference is not None and s.reference.set == "mqperf-2021"
        assert s.reference.experiment == table
        assert s.broker == BROKER_2021[stem]


def _published_2015(table: str) -> list[dict[str, str]]:
    return [r for r in _csv("mqperf-2015.csv") if r["table"] == table]


def test_each_2015_aws_file_sweeps_the_published_rows_of_its_table() -> None:
    files = sorted((SEEDS / "mqperf-2015" / "aws").glob("*.toml"))
    assert {p.stem for p in files} == {
        "sqs",
        "mongodb-sync",
        "mongodb-async",
        "rabbitmq",
        "rabbitmq-batches",
        "hornetq",
        "kafka-sync",
        "kafka-async",
    }
    for path in files:
        runs = load_scenario(path)
        ref = runs[0].reference
        assert ref is not None and ref.set == "mqperf-2015"
        rows = _published_2015(ref.experiment)
        if ref.experiment.startswith("mongodb"):
            rows = [r for r in rows if r["engine"] == "mmap"]  # WiredTiger only today
        rows = [r for r in rows if r["threads"]]  # SQS's 8-node maximum: threads not given
        want = [
            (int(r["threads"]), int(r["threads"]), int(r["nodes"]), int(r["nodes"])) for r in rows
        ]
        assert _grid(runs) == want, path.name
        assert [s.workload.send_batch_max for s in runs] == [int(r["send_batch_max"]) for r in rows]
        for s in runs:
            assert s.cluster.aws is not None
            assert s.cluster.aws.broker_instance_type == "m3.large"
            assert s.cluster.aws.client_instance_type == "m3.large"
            assert s.cluster.nodes == 3 and s.clients.processes_per_node == 1


def test_2015_local_files_are_one_small_run_of_the_first_row() -> None:
    files = sorted((SEEDS / "mqperf-2015" / "local").glob("*.toml"))
    # no SQS here: moto gives no figures, and mqperf-2021/local/sqs.toml runs it already
    assert {p.stem for p in files} == {"mongodb-sync", "rabbitmq", "hornetq", "kafka-sync"}
    for path in files:
        (s,) = load_scenario(path)
        assert s.reference is not None
        first = _published_2015(s.reference.experiment)[0]
        assert _grid([s]) == [(int(first["threads"]),) * 2 + (int(first["nodes"]),) * 2]
        assert s.cluster.target == "local" and s.workload.duration_s == 3


def test_bench_files_run_treats_rates_and_sizes_at_a_fixed_rate() -> None:
    aws = load_scenario(SEEDS / "bench" / "aws" / "nats-request-rates.toml")
    per_node = [
        (s.workload.message_bytes, s.clients.sender_threads * s.workload.rate_per_s) for s in aws
    ]
    # Treat: 256 B at 3,000/s, 1 KB at 3,000/s, 5 KB at 2,000/s, 1 KB at 20,000/s, 1 MB at 100/s
    assert per_node == [
        (256, 3000),
        (1024, 3000),
        (5120, 2000),
        (1024, 20000),
        (1_000_000, 100),
    ]
    commit = load_scenario(SEEDS / "bench" / "aws" / "nats-commit-log.toml")
    assert [s.workload.message_bytes for s in commit] == [256, 1024, 5120, 1_000_000]
    for s in [*aws, *commit]:
        assert s.workload.mode == "fixed_rate" and s.workload.duration_s == 30
        assert s.workload.send_batch_max == 1 and s.broker == "nats"
    local = [
        *load_scenario(SEEDS / "bench" / "local" / "nats-request-rates.toml"),
        *load_scenario(SEEDS / "bench" / "local" / "nats-commit-log.toml"),
    ]
    assert Counter(s.cluster.target for s in local) == {"local": 6}
    assert all(s.workload.mode == "fixed_rate" and s.workload.duration_s == 3 for s in local)
