"""The local Redis cluster (primary + 2 replicas, AOF) and the Redis Streams driver's own paths."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mqlab.clusters import process
from mqlab.clusters.redis import RedisCluster
from mqlab.drivers.base import Delivery
from mqlab.drivers.redis import RedisDriver, Settings
from mqlab.errors import DriverError
from mqlab.workload import envelope
from tests.integration.clusters.group_procs import in_groups

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    c = RedisCluster(tmp_path_factory.mktemp("redis") / "cluster")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _messages(n: int) -> list[bytes]:
    return envelope.encode_batch(3, 0, n, time.time_ns(), envelope.PayloadPool(64, seed=2))


def _client(c: RedisCluster, i: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=c.ports["client"][i], socket_timeout=5)


def test_primary_with_two_replicas_and_aof(cluster: RedisCluster) -> None:
    health = cluster.health()
    assert health["healthy"], health
    assert health["connected_replicas"] == 2
    assert [n["role"] for n in health["nodes"]] == ["master", "slave", "slave"]
    for i in range(3):
        r = _client(cluster, i)
        assert r.config_get("appendonly") == {"appendonly": "yes"}
        r.close()
    primary = _client(cluster, 0)
    primary.xadd("probe", {"m": b"x"})
    assert primary.execute_command("WAIT", 2, 5000) == 2
    replica = _client(cluster, 1)
    assert replica.xlen("probe") == 1
    primary.delete("probe")
    for r in (primary, replica):
        r.close()
    assert all(v.startswith("Redis server v=7") for v in cluster.server_versions())


def test_entries_spread_over_several_stream_keys(cluster: RedisCluster) -> None:
    driver = RedisDriver(
        Settings(streams=4, wait_replicas=2), cluster.endpoints(), f"k_{uuid.uuid4().hex[:8]}"
    )
    driver.setup()
    s, r = driver.sender(), driver.receiver()
    try:
        sent = _messages(40)
        for i in range(0, 40, 5):
            s.send(sent[i : i + 5])
        admin = _client(cluster, 0)
        assert [admin.xlen(k) for k in driver.keys] == [10, 10, 10, 10]
        got: list[Delivery] = []
        while len(got) < 40:
            batch = r.receive(7, 1.0)
            assert batch and len(batch) <= 7
            r.ack(batch)
            got += batch
        assert sorted(d.payload for d in got) == sorted(sent)
        assert [admin.xlen(k) for k in driver.keys] == [0, 0, 0, 0]  # XDEL after XACK
        admin.close()
    finally:
        s.close()
        r.close()
        driver.teardown()


def test_stalled_receiver_loses_its_entries_to_xautoclaim(cluster: RedisCluster) -> None:
    settings = Settings(visibility_timeout_s=1.0, reclaim_interval_s=0.2)
    driver = RedisDriver(settings, cluster.endpoints(), f"c_{uuid.uuid4().hex[:8]}")
    driver.setup()
    s, stalled, other = driver.sender(), driver.receiver(), driver.receiver()
    try:
        s.send(_messages(5))
        taken = stalled.receive(10, 1.0)
        assert len(taken) == 5  # stays alive but never acks
        deadline = time.monotonic() + 15
        claimed: list[Delivery] = []
        while len(claimed) < 5 and time.monotonic() < deadline:
            claimed += other.receive(10, 0.3)
        assert sorted(d.payload for d in claimed) == sorted(d.payload for d in taken)
        assert all(d.redelivered for d in claimed)
        other.ack(claimed)
    finally:
        for c in (s, stalled, other):
            c.close()
        driver.teardown()


def test_wait_fails_the_send_without_replicas(tmp_path: Path) -> None:
    c = RedisCluster(tmp_path / "cluster")
    c.start()
    try:
        driver = RedisDriver(Settings(wait_replicas=1, wait_timeout_ms=300), c.endpoints(), "w")
        driver.setup()
        s = driver.sender()
        s.send(_messages(2))  # replicas up: confirmed
        c.kill_node(1)
        c.kill_node(2)
        with pytest.raises(DriverError, match="WAIT 1"):
            s.send(_messages(2))
        s.close()
    finally:
        c.stop()


def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    c = RedisCluster(tmp_path / "cluster")
    c.start()
    records = list(c.procs.values())
    try:
        assert len(records) == 3 and all(process.is_alive(r) for r in records)
    finally:
        RedisCluster.load(tmp_path / "cluster").stop()  # as `mqlab cluster down` does
    assert not [r.pid for r in records if process.is_alive(r)]
    assert in_groups({r.pgid for r in records}) == []
    assert not (tmp_path / "cluster").exists()
