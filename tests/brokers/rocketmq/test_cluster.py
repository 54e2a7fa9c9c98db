"""The local RocketMQ cluster (Maven Central's 5.4.0): a name server, 3 brokers in one
DLedger group with a leader and 2 followers whose commit logs keep up with the leader's,
and the gRPC proxy; a confirmed send is in every broker's commit log (a killed leader:
test_faults.py). One cluster for the session (shared_lab)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from mqlab import envelope
from mqlab.brokers import servers
from mqlab.brokers.rocketmq import admin
from mqlab.brokers.rocketmq.cluster import RocketmqCluster
from mqlab.brokers.rocketmq.driver import RocketmqDriver, Settings
from tests.conftest import SharedLab

pytestmark = pytest.mark.integration

SYNC_WAIT_S = 60.0


@pytest.fixture
def cluster(shared_lab: SharedLab) -> RocketmqCluster:
    c = shared_lab.cluster("rocketmq")
    assert isinstance(c, RocketmqCluster)
    return c


def healthy(c: RocketmqCluster, timeout_s: float = SYNC_WAIT_S) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    health = c.health()
    while not health["healthy"] and time.monotonic() < deadline:
        time.sleep(1)
        health = c.health()
    return health


def _offsets(c: RocketmqCluster) -> list[int]:
    """Every broker's commit log length, asked of the broker itself."""
    out = []
    for i in range(c.nodes):
        info = admin.runtime_info((c.addr(i), c.ports["broker"][i]), 5.0)
        out.append(int(info["commitLogMaxOffset"]))
    return out


def test_a_dledger_group_of_a_leader_and_two_followers_in_sync(cluster: RocketmqCluster) -> None:
    health = healthy(cluster)
    assert health["healthy"], health
    leader = health["leader"]
    assert leader in range(3) and sorted(health["followers"]) == sorted({0, 1, 2} - {leader})
    assert health["in_sync"] == [0, 1, 2] and health["proxy"]
    # the name server lists the group: broker id 0 is the leader, the others follow
    group = cluster.group()
    assert sorted(group) == sorted(n["broker_id"] for n in health["nodes"]) and 0 in group
    assert (
        {n["version"] for n in health["nodes"]}
        == {"V5_4_0"}
        == {"V" + servers.version("rocketmq").replace(".", "_")}
    )
    ep = cluster.endpoints()
    assert ep.extra["stand_in"] is False and ep.extra["server"] == "RocketMQ 5.4.0"
    assert cluster.stand_in is None
    assert "RocketMQ 5.4.0" in cluster.server_versions()[0]


def test_a_confirmed_send_is_in_every_brokers_commit_log(cluster: RocketmqCluster) -> None:
    """After the sends return (SEND_OK: a majority appended), the leader's commit log grew
    by them and both followers' reach the same length: three copies."""
    assert healthy(cluster)["healthy"]
    driver = RocketmqDriver(Settings(), cluster.endpoints(), f"repl_{uuid.uuid4().hex[:8]}")
    driver.setup()
    try:
        leader = cluster.leader(driver)
        before = _offsets(cluster)
        s = driver.sender()
        try:
            pool = envelope.PayloadPool(512, seed=3)
            for k in range(5):
                s.send(envelope.encode_batch(1, 10 * k, 10, time.time_ns(), pool))
        finally:
            s.close()
        grown = _offsets(cluster)[leader] - before[leader]
        assert grown >= 50 * 512, (before, grown)
        deadline = time.monotonic() + SYNC_WAIT_S
        after = _offsets(cluster)
        while len(set(after)) > 1 and time.monotonic() < deadline:
            time.sleep(0.5)
            after = _offsets(cluster)
        assert len(set(after)) == 1 and after[leader] >= before[leader] + grown, (before, after)
        assert driver.remaining().count == 50
    finally:
        driver.teardown()


def test_the_jvms_temporary_files_stay_with_the_nodes_data(cluster: RocketmqCluster) -> None:
    """Each JVM's java.io.tmpdir is its node's own ``tmp``: what the JVMs unpack there
    (RocksDB's native library, self-signed certificates) goes with the cluster's data, not
    into /tmp, where a killed JVM would leave it behind on every run."""
    assert healthy(cluster)["healthy"]
    for i in range(cluster.nodes):
        tmp = Path(str(cluster.node_dir(i))) / "tmp"  # the broker's (RocksDB, certificates)
        assert list(tmp.glob("librocksdbjni*.so")), sorted(tmp.iterdir())
