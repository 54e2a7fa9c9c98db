"""The local Redis cluster (primary + 2 replicas, AOF, a sentinel per node) and the Redis
Streams driver's own paths, failover through Sentinel included."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import redis

from mqlab import envelope
from mqlab.brokers.base import Delivery, Receiver, Sender
from mqlab.brokers.redis.cluster import RedisCluster
from mqlab.brokers.redis.driver import RedisDriver, Settings
from mqlab.errors import DriverError
from mqlab.hosts import process
from tests.brokers.group_procs import in_groups

pytestmark = pytest.mark.integration
T = TypeVar("T")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    c = RedisCluster(tmp_path_factory.mktemp("redis") / "cluster")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _messages(n: int, first: int = 0) -> list[bytes]:
    return envelope.encode_batch(3, first, n, time.time_ns(), envelope.PayloadPool(64, seed=2))


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


def test_every_sentinel_knows_the_primary_its_replicas_and_the_others(
    cluster: RedisCluster,
) -> None:
    health = cluster.health()
    assert health["healthy"] and health["primary"] == 0, health
    for view in health["sentinels"]:
        assert view["primary"] == 0 and view["replicas"] == [1, 2], view
        assert view["sentinels"] == 3 and view["quorum"] == "OK", view
    for i in range(3):
        s = redis.Redis(host="127.0.0.1", port=cluster.ports["sentinel"][i], socket_timeout=5)
        host, port = s.sentinel_get_master_addr_by_name("mqlab")
        assert (host.decode(), int(port)) == ("127.0.0.1", cluster.ports["client"][0])
        s.close()
    extra = cluster.endpoints().extra
    assert extra["master"] == "mqlab"
    assert extra["sentinels"] == [["127.0.0.1", p] for p in cluster.ports["sentinel"]]
    assert cluster.leader(None) == 0


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


def test_stop_leaves_no_process_behind_not_even_a_sentinel(tmp_path: Path) -> None:
    c = RedisCluster(tmp_path / "cluster")
    c.start()
    sentinels = list(c.sentinel_records().values())
    records = [*c.procs.values(), *sentinels]
    try:
        assert len(sentinels) == 3 and len(records) == 6
        assert all(process.is_alive(r) for r in records)
    finally:
        RedisCluster.load(tmp_path / "cluster").stop()  # as `mqlab cluster down` does
    assert not [r.pid for r in records if process.is_alive(r)]
    assert in_groups({r.pgid for r in records}) == []
    assert not any(process.port_open("127.0.0.1", p) for p in c.ports["sentinel"])
    assert not (tmp_path / "cluster").exists()


def _until(what: str, deadline_s: float, probe: Callable[[], T | None]) -> tuple[T, float]:
    """Call ``probe`` until it returns something (not None); that and the seconds it took."""
    start = time.monotonic()
    while True:
        got = probe()
        if got is not None:
            return got, time.monotonic() - start
        if time.monotonic() - start > deadline_s:
            raise AssertionError(f"{what}: not within {deadline_s:.0f} s")
        time.sleep(0.2)


def _send_through(s: Sender, batch: list[bytes], deadline_s: float) -> int:
    """Send ``batch``, again after each failure (as a worker does); the failures."""
    failures = 0
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            s.send(batch)
            return failures
        except DriverError:
            failures += 1
            assert time.monotonic() < deadline, "sends still fail"
            time.sleep(0.2)


def _receive_all(r: Receiver, want: set[bytes], deadline_s: float) -> list[Delivery]:
    got: list[Delivery] = []
    deadline = time.monotonic() + deadline_s
    while not want <= {d.payload for d in got}:
        assert time.monotonic() < deadline, f"{len(want - {d.payload for d in got})} missing"
        try:
            batch = r.receive(10, 0.5)
            r.ack(batch)
        except DriverError:  # the old primary's connection, or no primary during failover
            time.sleep(0.2)
            continue
        got += batch
    return got


def _leader_other_than(c: RedisCluster, old: int) -> int | None:
    try:
        now = c.leader(None)
    except Exception:  # noqa: BLE001 - no sentinel answers for a moment: ask again
        return None
    return now if now != old else None


@pytest.mark.timeout(180)
def test_a_killed_primary_is_replaced_and_comes_back_as_a_replica(tmp_path: Path) -> None:
    c = RedisCluster(tmp_path / "cluster")
    c.start()
    sentinels = list(c.sentinel_records().values())
    records = [*c.procs.values(), *sentinels]
    driver = RedisDriver(Settings(wait_replicas=1), c.endpoints(), "failover")
    driver.setup()
    s, r = driver.sender(), driver.receiver()
    try:
        assert len(sentinels) == 3 and all(process.is_alive(x) for x in sentinels)
        before = _messages(20)
        s.send(before)  # WAIT 1: on a replica too
        old = c.leader(driver)
        assert old == 0
        c.kill_node(old)
        # until a replica is promoted a send fails (seconds: the sentinels wait 2 s before
        # they call the primary down); redis-py does not retry it behind the worker's back
        with pytest.raises(DriverError, match="send failed"):
            s.send(_messages(1, first=100))
        new, took = _until("a replica promoted", 15, lambda: _leader_other_than(c, old))
        print(f"redis: node {new} promoted {took:.1f} s after node {old} was killed")
        assert new in (1, 2) and c.info(new, "replication")["role"] == "master"
        # the same sender and receiver follow the new primary
        after = _messages(10, first=20)
        failures = _send_through(s, after, 20)
        got = _receive_all(r, set(before) | set(after), 20)
        assert {d.payload for d in got} == set(before) | set(after)
        print(f"redis: {failures} sends failed after the promotion")
        # the old primary comes back as a replica of the new one
        c.restart_node(old)
        records.append(c.procs[old])
        health, took = _until(
            "the old primary a replica", 30, lambda: (h := c.health())["healthy"] and h or None
        )
        print(f"redis: node {old} back as a replica after {took:.1f} s")
        assert health["primary"] == new and c.leader(driver) == new
        assert health["nodes"][old]["role"] == "slave" and health["nodes"][old]["master"] == new
        assert all(v["replicas"] == sorted({0, 1, 2} - {new}) for v in health["sentinels"])
        role = c.endpoints().nodes
        assert [n.extra["role"] for n in role] == [
            "primary" if i == new else "replica" for i in range(3)
        ]
        # without the sentinels the driver talks to the node the endpoints call primary
        plain = RedisDriver(Settings(), dataclasses.replace(c.endpoints(), extra={}), driver.queue)
        p = plain.connect()
        assert p.connection_pool.connection_kwargs["port"] == c.ports["client"][new]
        assert p.xlen(driver.keys[0]) == 0  # every entry was acked and deleted
        p.close()
    finally:
        s.close()
        r.close()
        driver.teardown()
        c.stop()
    assert not [x.pid for x in records if process.is_alive(x)]
    assert in_groups({x.pgid for x in records}) == []
