"""The local Pulsar cluster (1 ZooKeeper, 3 bookies, 3 brokers), on the session's shared
cluster: every ledger is replicated on the three bookies (ensemble 3, write quorum 3, ack
quorum 2, read from the ledger's own metadata); with a bookie killed, sends still return
(two bookies acknowledge each entry) and every confirmed message is received; with the
broker owning the topic killed, the topic moves to a live broker and nothing confirmed is
lost. Each test leaves the cluster healthy for the next one."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from mqlab import envelope
from mqlab.brokers.base import Delivery
from mqlab.brokers.pulsar import cluster as pc
from mqlab.brokers.pulsar import driver as pd
from mqlab.errors import DriverError
from tests.brokers.conftest import driver_on
from tests.brokers.test_contract import _messages
from tests.conftest import SharedLab

pytestmark = pytest.mark.integration
RECOVER_S = 180.0  # a restarted bookie or broker JVM on this shared 2-core machine


@pytest.fixture
def cluster(shared_lab: SharedLab) -> pc.PulsarCluster:
    c = shared_lab.cluster("pulsar")
    assert isinstance(c, pc.PulsarCluster)
    return c


@pytest.fixture
def driver(shared_lab: SharedLab) -> Iterator[pd.PulsarDriver]:
    with driver_on(shared_lab, "pulsar", "pulsar") as d:
        yield d


def _wait_healthy(c: pc.PulsarCluster) -> dict:
    deadline = time.monotonic() + RECOVER_S
    health = c.health()
    while not health["healthy"]:
        assert time.monotonic() < deadline, f"not healthy again: {health}"
        time.sleep(2)
        health = c.health()
    return health


def _ledgers(c: pc.PulsarCluster, queue: str) -> list[dict]:
    url = f"{c.admin_urls[0]}/admin/v2/persistent/public/default/{queue}/internalStats"
    return list(json.loads(pd._http("GET", url + "?metadata=true"))["ledgers"])


def _drain(driver: pd.PulsarDriver, want: int) -> list[int]:
    r = driver.receiver()
    got: list[Delivery] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < want and time.monotonic() < deadline:
            batch = r.receive(100, 1.0)
            r.ack(batch)
            got += batch
    finally:
        r.close()
    return sorted(envelope.decode(d.payload)[1] for d in got)


def test_the_real_cluster_replicates_every_ledger_on_the_three_bookies(
    cluster: pc.PulsarCluster, driver: pd.PulsarDriver
) -> None:
    health = cluster.health()
    assert health["healthy"], health
    assert health["probe"]["ensemble"] == sorted(cluster.bookie_ids)
    assert len(set(cluster.bookie_ids)) == 3 and all(health["bookies"].values())
    ep = cluster.endpoints()
    assert ep.extra["stand_in"] is False and cluster.stand_in is None
    assert cluster.server_versions()[0].startswith("Apache Pulsar 4.2.4 ")
    assert len(ep.nodes) == 3 and len(ep.extra["admin_urls"]) == 3
    s = driver.sender()
    try:
        s.send(_messages(5))
    finally:
        s.close()
    # the driver's own topic: its ledger striped over all three bookies, 3 copies, 2 acks
    [ledger] = _ledgers(cluster, driver.queue)
    meta = ledger["metadata"]
    assert pc.quorums(meta) == (3, 3, 2)
    assert [sorted(e) for e in pc.ensembles(meta)] == [sorted(cluster.bookie_ids)]
    assert _drain(driver, 5) == list(range(5))


def test_a_killed_bookie_leaves_sends_confirmed_by_the_other_two(
    cluster: pc.PulsarCluster, driver: pd.PulsarDriver
) -> None:
    s = driver.sender()
    try:
        s.send(_messages(10))
        cluster.kill_bookie(2)
        assert cluster.health()["bookies"][cluster.bookie_ids[2]] is False
        later = envelope.encode_batch(1, 10, 20, time.time_ns(), envelope.PayloadPool(64, seed=3))
        s.send(later)  # returns: ack quorum 2 of the ensemble's 3 bookies
    finally:
        s.close()
        cluster.restart_bookie(2)
    # no other bookie could replace the dead one: every ensemble is still the three
    for ledger in _ledgers(cluster, driver.queue):
        for ensemble in pc.ensembles(ledger["metadata"]):
            assert sorted(ensemble) == sorted(cluster.bookie_ids)
    assert _drain(driver, 30) == list(range(30))
    _wait_healthy(cluster)


def test_the_broker_owning_the_topic_killed_loses_no_confirmed_message(
    cluster: pc.PulsarCluster, driver: pd.PulsarDriver
) -> None:
    owner = cluster.leader(driver)
    s = driver.sender()
    try:
        s.send(_messages(10))
    finally:
        s.close()
    cluster.kill_node(owner)
    try:
        # a new producer finds the topic's new owner, once the dead one's metadata
        # session (10 s) has expired
        # (a sender makes its pulsar-client producer at its first send)
        deadline = time.monotonic() + 90
        batch = envelope.encode_batch(1, 10, 10, time.time_ns(), envelope.PayloadPool(64))
        while True:
            s = pd.PulsarSender(driver)
            try:
                s.send(batch)
                break
            except DriverError:
                assert time.monotonic() < deadline, "no broker took the topic over"
            finally:
                s.close()
        assert cluster.leader(driver) != owner
        assert _drain(driver, 20) == list(range(20))
    finally:
        cluster.restart_node(owner)
    _wait_healthy(cluster)


def test_the_jvms_temporary_files_stay_with_the_nodes_data(cluster: pc.PulsarCluster) -> None:
    """Each JVM's java.io.tmpdir is its own directory's ``tmp``: what the JVMs unpack there
    (RocksDB's and the checksum's native libraries) goes with the cluster's data, not into
    /tmp, where a killed JVM would leave it behind on every run."""
    for j in range(pc.BOOKIES):
        tmp = cluster.workdir / f"bookie{j}" / "tmp"
        assert list(tmp.glob("librocksdbjni*.so")), sorted(tmp.iterdir())
