"""Redis only: remaining() when acked entries stay in the streams (``delete_on_ack=False``),
and the primary found through the sentinels or, without them, named by the endpoints."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.sentinel import SentinelConnectionPool

from mqlab import envelope
from mqlab.brokers.redis.driver import RedisDriver, close_client
from mqlab.errors import DriverError
from tests.brokers.conftest import driver_on
from tests.brokers.targets import TARGETS
from tests.brokers.test_contract import _drain, _messages, _seqs
from tests.conftest import SharedLab

pytestmark = pytest.mark.integration


@pytest.fixture
def driver(shared_lab: SharedLab) -> Iterator[RedisDriver]:
    with driver_on(shared_lab, "redis-keep", "keep") as d:
        yield d


def test_remaining_counts_unread_entries_when_redis_cannot_tell_the_lag(
    driver: RedisDriver,
) -> None:
    s = driver.sender()
    for _ in driver.keys:  # one batch per key (the sender rotates over them)
        s.send(_messages(4))
    s.close()
    r = driver.connect()
    try:
        key = driver.keys[0]
        entries: Any = r.xrange(key, count=2)
        doomed = entries[1][0]  # not the first: a tombstone among the unread
        r.xdel(key, doomed)  # XINFO GROUPS then reports lag as nil
        groups = r.xinfo_groups(key)
        assert groups[0]["lag"] is None
    finally:
        r.close()
    left = 4 * len(driver.keys) - 1
    found = driver.remaining(identify=True)
    assert found.count == left and found.in_flight == 0
    assert found.payloads is not None and len(found.payloads) == left
    assert all(envelope.decode(p)[0] == 7 for p in found.payloads)
    assert driver.remaining().count == left


def test_the_primary_comes_from_the_sentinels_or_else_from_the_endpoints(
    shared_lab: SharedLab,
) -> None:
    cluster: Any = shared_lab.cluster("redis")
    primary = ("127.0.0.1", cluster.ports["client"][cluster.leader(None)])
    endpoints = cluster.endpoints()
    assert len(endpoints.extra["sentinels"]) == 3 and endpoints.extra["master"] == "mqlab"
    followed = RedisDriver(TARGETS["redis"].settings(), endpoints, "x")
    r = followed.connect()
    try:
        assert isinstance(r.connection_pool, SentinelConnectionPool)
        assert r.connection_pool.get_master_address() == primary
        assert r.ping()
    finally:
        close_client(r)
    # a coordinator that reaches the nodes elsewhere (tunnels) connects there to the
    # primary the sentinels name by its own address
    elsewhere = dataclasses.replace(
        endpoints,
        nodes=tuple(dataclasses.replace(n, host="localhost") for n in endpoints.nodes),
    )
    assert all(n.extra["address"] == f"127.0.0.1:{n.port}" for n in elsewhere.nodes)
    r = RedisDriver(TARGETS["redis"].settings(), elsewhere, "x").connect()
    try:
        assert r.connection_pool.get_master_address() == ("localhost", primary[1])
        assert r.ping()
    finally:
        close_client(r)
    # no sentinels in the endpoints: as before them, the node whose role is primary
    plain_endpoints = dataclasses.replace(endpoints, extra={})
    plain = RedisDriver(TARGETS["redis"].settings(), plain_endpoints, f"p_{uuid.uuid4().hex[:8]}")
    plain.setup()
    s, rc = plain.sender(), plain.receiver()
    try:
        c = plain.connect()
        assert not isinstance(c.connection_pool, SentinelConnectionPool)
        kwargs = c.connection_pool.connection_kwargs
        assert (kwargs["host"], kwargs["port"]) == primary
        c.close()
        s.send(_messages(5))  # WAIT 1 as in the contract suite
        assert sorted(_seqs(_drain(rc, 5))) == list(range(5))
    finally:
        s.close()
        rc.close()
        plain.teardown()


def test_a_senders_connection_fails_over_one_line_and_the_next_send_reconnects(
    shared_lab: SharedLab,
) -> None:
    """The sender's own wire: an error reply (after every reply of the batch was read),
    a connection the server closed, and a server that does not answer within
    ``socket_timeout_s`` each fail that send with one line; the next send works."""
    cluster: Any = shared_lab.cluster("redis")
    settings = dataclasses.replace(TARGETS["redis"].settings(), socket_timeout_s=1.0)
    d = RedisDriver(settings, cluster.endpoints(), f"wire_{uuid.uuid4().hex[:8]}")
    admin = d.connect()
    s = d.sender()
    pool = envelope.PayloadPool(64, seed=3)
    try:
        admin.set(d.keys[0], "not a stream")  # every XADD of the batch: WRONGTYPE
        with pytest.raises(DriverError, match="WRONGTYPE"):
            s.send_stamped(1, 0, 3, 0, pool)
        admin.delete(d.keys[0])
        d.setup()
        s.send_stamped(1, 3, 3, 0, pool)
        assert admin.xlen(d.keys[0]) == 3

        host, port = s.wire.sock.getsockname()[:2]
        assert admin.client_kill(f"{host}:{port}")
        with pytest.raises(DriverError, match="send failed"):
            s.send_stamped(1, 6, 3, 0, pool)
        s.send_stamped(1, 9, 3, 0, pool)

        admin.execute_command("CLIENT", "PAUSE", "2500", "WRITE")
        t0 = time.monotonic()
        with pytest.raises(DriverError, match=r"no reply within 1 s"):
            s.send_stamped(1, 12, 3, 0, pool)
        assert 0.9 < time.monotonic() - t0 < 2.4
        admin.execute_command("CLIENT", "UNPAUSE")
        s.send_stamped(1, 15, 3, 0, pool)
        assert admin.xlen(d.keys[0]) >= 9  # the paused batch may have gone in after all
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        s.close()
        close_client(admin)
        d.teardown()
        d.close()
