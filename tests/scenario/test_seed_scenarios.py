"""The published experiments as scenarios (scenarios/seeds/): each AWS-sized file sweeps
exactly the published rows of its system (computed here from the reference CSVs), on the
article's hardware; each local file is the first rows of its table, small."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

import mqlab.cli.checks  # noqa: F401 - registers the checks from above (AWS, published sets)
from mqlab.scenario.load import load_scenario
from mqlab.scenario.model import Scenario

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "scenarios" / "seeds"
REFERENCE = ROOT / "mqlab" / "published" / "data"

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
        c = s.clients  # threads are per node, whatever its processes
        out.append((c.sender_threads, c.receiver_threads, c.sender_nodes, c.receiver_nodes))
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


# brokers-bench: (topics, producers, consumers, message bytes, partitions per topic) as the
# report states each experiment's set-up (/work/shared/seeds/001_*.txt in the lab)
BB_SETUP = {
    "compression-1kb": (10, 10, 10, 1024, 1),
    "compression-10kb": (10, 10, 10, 10240, 1),
    "producers-4-topics": (4, 40, 4, 1024, 1),
    "producers-10-topics": (10, 100, 10, 1024, 1),
    "producers-10-topics-10-partitions": (10, 100, 10, 1024, 10),
    "vertical-10-cores": (10, 100, 10, 1024, 1),
}
BB_NEW = {
    # file stem -> (experiment, brokers, local file?)
    "compression-1kb": ("compression-1kb", ["redpanda"] * 3, True),
    "compression-10kb": ("compression-10kb", ["redpanda"] * 3, True),
    "producers-4-topics": ("producers-4-topics", ["kafka", "redpanda"], True),
    "producers-10-topics-10-partitions": (
        "producers-10-topics-10-partitions",
        ["kafka", "redpanda"],
        True,
    ),
    "producers-10-topics-nats": ("producers-10-topics", ["nats"], True),
    "vertical-10-cores": ("vertical-10-cores", ["kafka", "redpanda"], False),
    "vertical-10-cores-nats": ("vertical-10-cores", ["nats"], False),
}


def _bb_shape(s: Scenario) -> tuple[int, int, int, int, int]:
    c = s.clients  # threads are per node, whatever its processes
    return (
        s.workload.queues,
        c.sender_nodes * c.sender_threads,
        c.receiver_nodes * c.receiver_threads,
        s.workload.message_bytes,
        int(getattr(s.profile.settings, "partitions", 1)),
    )


def _bb_files(stem: str) -> list[tuple[str, Path]]:
    exp, _brokers, has_local = BB_NEW[stem]
    out = [("aws", SEEDS / "brokers-bench" / "aws" / f"{stem}-aws.toml")]
    if has_local:
        out.append(("local", SEEDS / "brokers-bench" / "local" / f"{stem}.toml"))
    return out


def test_every_brokers_bench_experiment_has_an_aws_file() -> None:
    experiments = {r["experiment"] for r in _csv("brokers-bench.csv")}
    named = set()
    for path in (SEEDS / "brokers-bench" / "aws").glob("*.toml"):
        ref = load_scenario(path)[0].reference
        assert ref is not None and ref.set == "brokers-bench"
        named.add(ref.experiment)
    assert named == experiments
    local = set()
    for path in (SEEDS / "brokers-bench" / "local").glob("*.toml"):
        ref = load_scenario(path)[0].reference
        assert ref is not None
        local.add(ref.experiment)
    # vertical scaling is the broker hosts' cores: AWS only (its file says why)
    assert local == experiments - {"vertical-10-cores"}
    assert not (SEEDS / "brokers-bench" / "local" / "vertical-10-cores.toml").exists()
    assert (
        "AWS only" in (SEEDS / "brokers-bench" / "aws" / "vertical-10-cores-aws.toml").read_text()
    )


@pytest.mark.parametrize("stem", sorted(BB_NEW))
def test_new_brokers_bench_files_have_the_reports_setup(stem: str) -> None:
    exp, brokers, _local = BB_NEW[stem]
    for target, path in _bb_files(stem):
        runs = load_scenario(path)
        assert [s.broker for s in runs] == brokers, path.name
        for s in runs:
            assert _bb_shape(s) == BB_SETUP[exp], path.name
            assert s.reference is not None
            assert (s.reference.set, s.reference.experiment) == ("brokers-bench", exp)
            assert s.cluster.target == target
            assert (s.workload.send_batch_min, s.workload.send_batch_max) == (1, 1)
            if s.broker != "nats":
                assert s.profile.settings.acks == "1"  # the report: leader ack
            # one partition per topic keeps each producer's order; ten do not
            assert s.workload.order == ("any" if BB_SETUP[exp][4] > 1 else "strict")
            if target == "local":
                assert s.workload.duration_s <= 4
                assert s.clients.processes_per_node == 1
            else:
                assert s.cluster.nodes == 3 and s.cluster.aws is not None
                assert s.workload.duration_s == 60
                assert "standin" not in s.profile.name
                want = "i3.4xlarge" if exp == "vertical-10-cores" else "i3.large"
                assert s.cluster.aws.broker_instance_type == want


@pytest.mark.parametrize("kb", [1, 10])
def test_brokers_bench_compression_sweeps_none_gzip_snappy(kb: int) -> None:
    for _target, path in _bb_files(f"compression-{kb}kb"):
        runs = load_scenario(path)
        assert [getattr(s.profile.settings, "compression", "none") for s in runs] == [
            "none",
            "gzip",
            "snappy",
        ]
    published = {
        r["compression"]
        for r in _csv("brokers-bench.csv")
        if r["experiment"] == f"compression-{kb}kb"
    }
    assert published == {"none", "gzip", "snappy"}


def test_brokers_bench_nats_ten_topics_are_ten_r3_streams() -> None:
    for _target, path in _bb_files("producers-10-topics-nats") + [
        ("aws", SEEDS / "brokers-bench" / "aws" / "vertical-10-cores-nats-aws.toml")
    ]:
        (s,) = load_scenario(path)
        assert s.profile.name == "nats-r3" and s.cluster.nodes == 3
        assert s.workload.queues == 10  # one stream per queue; the report: 1 stream, 10 subjects
        assert "one stream per queue" in path.read_text()


TREAT_SYSTEMS = ("kafka", "redis", "rabbitmq")


@pytest.mark.parametrize("broker", TREAT_SYSTEMS)
def test_treats_request_rates_run_for_every_system_of_the_post(broker: str) -> None:
    aws = load_scenario(SEEDS / "bench" / "aws" / f"{broker}-request-rates.toml")
    per_node = [
        (s.workload.message_bytes, s.clients.sender_threads * s.workload.rate_per_s) for s in aws
    ]
    # Treat: 256 B at 3,000/s, 1 KB at 3,000/s, 5 KB at 2,000/s, 1 KB at 20,000/s (25
    # connections), 1 MB at 100/s; 30 s each, on m4.xlarge
    assert per_node == [(256, 3000), (1024, 3000), (5120, 2000), (1024, 20000), (1_000_000, 100)]
    assert [s.clients.sender_threads for s in aws] == [1, 1, 1, 25, 1]
    local = load_scenario(SEEDS / "bench" / "local" / f"{broker}-request-rates.toml")
    assert [(s.workload.message_bytes, s.workload.rate_per_s) for s in local] == [
        (256, 300),
        (1024, 300),
        (5120, 200),
    ]
    for s in [*aws, *local]:
        assert s.broker == broker and s.workload.mode == "fixed_rate"
        assert s.workload.send_batch_max == 1 and s.reference is None  # plots only: no set
    for s in aws:
        assert s.workload.duration_s == 30 and s.cluster.aws is not None
        assert s.cluster.aws.broker_instance_type == "m4.xlarge"
    assert all(s.cluster.target == "local" and s.workload.duration_s == 3 for s in local)


def test_treats_commit_log_kafka_side_meets_the_kafka_table() -> None:
    aws = load_scenario(SEEDS / "bench" / "aws" / "kafka-commit-log.toml")
    local = load_scenario(SEEDS / "bench" / "local" / "kafka-commit-log.toml")
    assert [s.workload.message_bytes for s in aws] == [256, 1024, 5120, 1_000_000]
    assert [s.workload.message_bytes for s in local] == [256, 1024, 5120]
    for s in [*aws, *local]:
        assert s.broker == "kafka" and s.profile.settings.replicas == 1  # his RF 1
        assert s.cluster.nodes == 1  # one Kafka broker, as his
        assert s.workload.mode == "fixed_rate" and s.workload.rate_per_s == 50
        assert s.reference is not None
        assert (s.reference.set, s.reference.experiment) == ("treat-commit-logs", "kafka-rf1")
    assert all(s.workload.duration_s == 30 for s in aws)
    published = {
        int(r["message_bytes"]) for r in _csv("treat-commit-logs.csv") if r["system"] == "Kafka"
    }
    assert published == {256, 1024, 5120, 1_048_576}


DISSECTING = {"artemis", "rabbitmq", "kafka", "redis", "nats"}  # his brokered ones mqlab drives


def test_dissecting_message_queues_one_producer_one_consumer_1kb() -> None:
    for target, count in (("aws", 1_000_000), ("local", 20_000)):
        files = sorted((SEEDS / "bench" / target).glob("dissecting-*.toml"))
        assert {p.stem.removeprefix("dissecting-") for p in files} == DISSECTING
        for path in files:
            (s,) = load_scenario(path)
            assert s.broker == path.stem.removeprefix("dissecting-")
            assert s.cluster.target == target
            assert s.workload.message_bytes == 1024
            assert s.workload.messages_per_thread == count
            assert s.workload.mode == "closed_loop"
            c = s.clients
            assert (c.sender_nodes, c.receiver_nodes, c.sender_threads, c.receiver_threads) == (
                1,
                1,
                1,
                1,
            )
            assert s.reference is None  # the post's figures are charts only
