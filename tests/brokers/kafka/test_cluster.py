"""The real Kafka cluster (Apache Kafka from Maven Central, 3 KRaft nodes): replication
proven from the cluster's own metadata, a topic that outlives a killed node, and
`mqlab cluster status` on it."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mqlab.brokers import servers
from mqlab.brokers.kafka.cluster import KafkaCluster
from mqlab.cli import main
from mqlab.hosts import process
from tests.conftest import SharedLab

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka(shared_lab: SharedLab) -> KafkaCluster:
    cluster = shared_lab.cluster("kafka")
    assert isinstance(cluster, KafkaCluster)
    return cluster


def _wait(what: str, check: Any, timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s:.0f} s"
        time.sleep(0.5)


def _topic(cluster: KafkaCluster, partitions: int) -> str:
    name = f"repl_{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # no replication factor given: the cluster's default.replication.factor decides
    topic = NewTopic(name, num_partitions=partitions)
    admin.create_topics([topic])[name].result(30)
    return name


def _delete(cluster: KafkaCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # held until the result
    admin.delete_topics([topic])[topic].result(30)


def _produce(cluster: KafkaCluster, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    failed: list[Any] = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert p.flush(60) == 0 and failed == [], failed


def _read(cluster: KafkaCluster, topic: str, partitions: int, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        c.close()


def test_the_cluster_is_three_real_kafka_nodes(kafka: KafkaCluster) -> None:
    health = kafka.health()
    assert health["healthy"], health
    assert sorted(health["probe"]["isr"]) == [0, 1, 2]
    assert [n["registered"] for n in health["nodes"]] == [True] * 3
    ep = kafka.endpoints()
    assert ep.extra == {"server": "Apache Kafka 4.4.0", "stand_in": False}
    assert kafka.stand_in is None
    assert kafka.server_versions() == [f"Apache Kafka {servers.version('kafka')}"]
    # the JVMs run the pinned jars, each with its own log4j2 configuration and small heap
    for i, rec in kafka.procs.items():
        cmdline = Path(f"/proc/{rec.pid}/cmdline").read_bytes().split(b"\0")
        assert b"kafka.Kafka" in cmdline and b"-Xmx512m" in cmdline
        assert any(a.startswith(b"-Dlog4j2.configurationFile=") for a in cmdline)
        log = Path(str(kafka.node_dir(i))) / "logs" / "server.log"
        assert "Kafka Server started" in log.read_text()  # log4j2 writes the broker's log


def test_every_partition_has_three_in_sync_replicas(kafka: KafkaCluster) -> None:
    topic = _topic(kafka, 6)
    parts = _wait("6 partitions in sync", lambda: _all_in_sync(kafka, topic, 6, 3))
    assert {len(p["replicas"]) for p in parts.values()} == {3}
    # leaders spread over the nodes, every replica on a distinct node
    assert all(sorted(p["replicas"]) == [0, 1, 2] for p in parts.values())
    _delete(kafka, topic)


def _all_in_sync(kafka: KafkaCluster, topic: str, partitions: int, isr: int) -> Any:
    parts = kafka.partitions(topic)
    ok = len(parts) == partitions and all(len(p["isr"]) == isr for p in parts.values())
    return parts if ok else None


def test_a_topic_survives_a_killed_node_with_two_in_sync_replicas(kafka: KafkaCluster) -> None:
    """Node 2 SIGKILLed: once the controllers fence it the in-sync replicas shrink to 2,
    acks=all writes still succeed (min.insync.replicas 2), every message written before
    and during reads back, and the node restarted catches up to 3 in sync again."""
    topic = _topic(kafka, 3)
    _wait("3 in sync", lambda: _all_in_sync(kafka, topic, 3, 3))
    before = [f"before-{i}".encode() for i in range(50)]
    _produce(kafka, topic, before)
    victim = 2
    kafka.kill_node(victim)
    try:
        parts = _wait("ISR shrunk to 2", lambda: _all_in_sync(kafka, topic, 3, 2))
        assert all(victim not in p["isr"] and p["leader"] != victim for p in parts.values())
        during = [f"during-{i}".encode() for i in range(50)]
        _produce(kafka, topic, during)
        assert sorted(_read(kafka, topic, 3, 100)) == sorted(before + during)
    finally:
        kafka.restart_node(victim)
    _wait("3 in sync again", lambda: _all_in_sync(kafka, topic, 3, 3))
    _wait("cluster healthy", lambda: kafka.health()["healthy"])
    _delete(kafka, topic)


def test_cluster_status_reports_the_in_sync_probe(
    kafka: KafkaCluster, shared_lab: SharedLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQLAB_STATE_DIR", str(shared_lab.root))
    status = CliRunner().invoke(main, ["cluster", "status", "kafka"])
    assert status.exit_code == 0, status.output
    for said in ('"healthy": true', '"stand_in": false', '"server": "Apache Kafka 4.4.0"'):
        assert said in status.output, status.output
    assert '"in_sync": false' not in status.output, status.output
    assert all(process.port_open("127.0.0.1", p) for p in kafka.ports["kafka"])
