"""The local RabbitMQ cluster: 3 nodes in one cluster, quorum queues with a leader and 2 followers,
and every process we started (the nodes and our own epmd) gone after stop."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from mqlab import envelope
from mqlab.brokers.rabbitmq.cluster import RabbitmqCluster, node_name
from mqlab.brokers.rabbitmq.driver import RabbitmqDriver, Settings
from mqlab.hosts import process
from tests.brokers.group_procs import in_groups

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitmqCluster]:
    c = RabbitmqCluster(tmp_path_factory.mktemp("rabbitmq") / "cluster")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_three_nodes_in_one_cluster(cluster: RabbitmqCluster) -> None:
    health = cluster.health()
    assert health["healthy"], health
    assert sorted(health["running_nodes"]) == [node_name(i) for i in range(3)]
    probe = cluster.extra["quorum_probe"]  # checked while starting
    assert probe["leader"] and len(probe["followers"]) == 2
    assert cluster.server_versions()[0].startswith("RabbitMQ 3.")


def test_driver_queue_has_a_leader_and_two_followers(cluster: RabbitmqCluster) -> None:
    driver = RabbitmqDriver(Settings(), cluster.endpoints(), f"q_{uuid.uuid4().hex[:8]}")
    driver.setup()
    try:
        deadline = time.monotonic() + 30
        members = cluster.quorum_members(driver.queue)
        while len(members["followers"]) < 2 and time.monotonic() < deadline:
            time.sleep(1)
            members = cluster.quorum_members(driver.queue)
        assert members["leader"] in {node_name(i) for i in range(3)}
        assert len(members["followers"]) == 2
        assert members["leader"] not in members["followers"]
        # kill_leader's choice: the node RabbitMQ names as the queue's leader
        assert node_name(cluster.leader(driver)) == members["leader"]
        s = driver.sender()
        sent = envelope.encode_batch(1, 0, 10, time.time_ns(), envelope.PayloadPool(64, seed=3))
        s.send(sent)  # returns after the publisher confirms
        s.close()
        versions = driver.server_versions()
        assert len(versions) == 3 and all(v.startswith("RabbitMQ 3.") for v in versions)
    finally:
        driver.teardown()
        driver.close()


def test_stop_leaves_no_process_behind_not_even_epmd(cluster: RabbitmqCluster) -> None:
    [(_node, epmd)] = cluster.epmd_records()  # one host: one epmd
    assert process.is_alive(epmd)
    records = [*cluster.procs.values(), epmd]
    assert all(process.is_alive(r) for r in records)
    RabbitmqCluster.load(cluster.workdir).stop()  # as `mqlab cluster down` does
    assert not [r.pid for r in records if process.is_alive(r)]
    assert in_groups({r.pgid for r in records}) == []
    assert not process.port_open("127.0.0.1", cluster.ports["epmd"])
    cluster.procs = {}
