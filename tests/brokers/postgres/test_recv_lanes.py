"""PostgreSQL receivers in lanes (the driver's receive_lanes, mqlab/_recvpath.c) on a real
3-node cluster: every message once, acked by the time the call returns; a message
delivered before flagged; rows an earlier receive held ahead released first; a lane whose
connection died fails alone and connects again next call; the worker's loop records it."""

from __future__ import annotations

import array
import os
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import LaneReceipt
from mqlab.brokers.postgres.cluster import PostgresCluster
from mqlab.brokers.postgres.driver import PostgresDriver, Settings, merged
from mqlab.errors import DriverError
from tests.brokers.conftest import worker_loop_headers

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        compiled.recv_module is None, reason="not built: tests/brokers/test_sendpath.py fails"
    ),
]
PATIENCE_NS = 60_000_000_000  # a bound on waiting for the server, never an expectation


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    c = PostgresCluster(tmp_path_factory.mktemp("pg") / "cluster")
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def wake() -> Iterator[tuple[int, int]]:
    rfd, wfd = os.pipe()
    yield rfd, wfd
    os.close(rfd)
    os.close(wfd)


def _driver(cluster: PostgresCluster, queue: str, **settings: Any) -> PostgresDriver:
    d = PostgresDriver(Settings(**settings), cluster.endpoints(), queue)
    d.teardown()
    d.setup()
    return d


def _messages(n: int) -> list[bytes]:
    return [envelope.encode(3, i, 5, b"x" * 40) for i in range(n)]


def _seqs(receipts: list[LaneReceipt]) -> list[int]:
    return sorted(
        envelope.HEADER.unpack_from(r.headers, i)[3]
        for r in receipts
        for i in range(0, len(r.headers), envelope.HEADER_BYTES)
    )


def _until_empty(driver: PostgresDriver, receivers: list[Any], wake_fd: int) -> list[LaneReceipt]:
    """receive_lanes, each call a short one, until the table is empty (bounded)."""
    out: list[LaneReceipt] = []
    give_up = time.monotonic_ns() + PATIENCE_NS
    while driver.remaining().count and time.monotonic_ns() < give_up:
        until = time.monotonic_ns() + 200_000_000
        out += driver.receive_lanes(receivers, 10, until, 0, wake_fd)
    return out


def test_every_message_once_all_acked_when_the_call_returns(
    cluster: PostgresCluster, wake: tuple[int, int]
) -> None:
    d = _driver(cluster, "lanes_once")
    s, r1, r2 = d.sender(), d.receiver(), d.receiver()
    try:
        s.send(_messages(45) + [b"short"])
        got = _until_empty(d, [r1, r2], wake[0])
        assert all(g.error is None for g in got)
        assert _seqs(got) == list(range(45))
        assert sum(g.received for g in got) == 46 and sum(g.short for g in got) == 1
        assert sum(g.acked for g in got) == 46
        assert not any(g.flagged for g in got)
        assert sum(sum(array.array("q", g.lens)) for g in got) == 45
        left = d.remaining()
        assert (left.count, left.in_flight) == (0, 0)
    finally:
        for c in (s, r1, r2):
            c.close()
        d.teardown()


def test_a_message_delivered_before_is_flagged(
    cluster: PostgresCluster, wake: tuple[int, int]
) -> None:
    d = _driver(cluster, "lanes_again", visibility_timeout_s=0.2)
    s, first, lane = d.sender(), d.receiver(), d.receiver()
    try:
        s.send(_messages(5))
        taken = first.receive(3, 5.0)  # never acked: they come again after 0.2 s
        assert len(taken) == 3
        got = _until_empty(d, [lane], wake[0])
        assert _seqs(got) == list(range(5))
        flagged = [
            envelope.HEADER.unpack_from(g.headers, 24 * i)[3]
            for g in got
            for i in array.array("q", g.flagged)
        ]
        assert sorted(flagged) == sorted(envelope.HEADER.unpack_from(t.payload)[3] for t in taken)
    finally:
        for c in (s, first, lane):
            c.close()
        d.teardown()


def test_rows_held_ahead_are_released_before_the_lane_claims(
    cluster: PostgresCluster, wake: tuple[int, int]
) -> None:
    d = _driver(cluster, "lanes_ahead")
    s, r, other = d.sender(), d.receiver(), d.receiver()
    try:
        s.send(_messages(6))
        first = r.receive(2, 5.0)
        r.ack(first)  # deleted, and two more claimed ahead by r
        assert d.remaining().in_flight == 2
        got = _until_empty(d, [other, r], wake[0])  # r in lanes: what it held is free
        done = {envelope.HEADER.unpack_from(m.payload)[3] for m in first}
        assert _seqs(got) == sorted(set(range(6)) - done)
        assert not any(g.flagged for g in got)  # the claim ahead was not counted
    finally:
        for c in (s, r, other):
            c.close()
        d.teardown()


@pytest.mark.parametrize("connections", [1, 2, 3])
def test_stop_acks_what_was_received_a_claim_in_flight_per_connection(
    cluster: PostgresCluster, wake: tuple[int, int], connections: int
) -> None:
    d = _driver(cluster, f"lanes_stop{connections}", receive_connections=connections)
    s, r = d.sender(), d.receiver()
    try:
        s.send(_messages(40))
        os.write(wake[1], b"x")  # stop is set before the call: a batch per connection, acked
        (got,) = d.receive_lanes([r], 10, time.monotonic_ns() + PATIENCE_NS, 0, wake[0])
        assert got.error is None and got.received == got.acked == 10 * connections
        assert array.array("q", got.lens).tolist() == [10] * connections
        assert len(r.lane_clients) == connections
        backends = {c.conn.info.backend_pid for c in r.lane_clients if c.conn is not None}
        assert len(backends) == connections
        left = d.remaining()
        assert (left.count, left.in_flight) == (40 - 10 * connections, 0)
        assert _seqs([got]) == sorted(set(_seqs([got])))  # no message twice
    finally:
        s.close()
        r.close()
        d.teardown()


def test_a_lane_whose_connection_died_fails_alone_and_connects_again(
    cluster: PostgresCluster, wake: tuple[int, int]
) -> None:
    d = _driver(cluster, "lanes_dead", visibility_timeout_s=0.2)
    s, dead, alive = d.sender(), d.receiver(), d.receiver()
    admin = psycopg.connect(
        host="127.0.0.1", port=cluster.ports["pg"][0], user="postgres", autocommit=True
    )
    try:
        s.send(_messages(4))
        dead.lane_sockets()
        first, second = dead.lane_clients  # receive_connections = 2
        assert first.conn is not None and second.conn is not None
        admin.execute("SELECT pg_terminate_backend(%s)", (first.conn.info.backend_pid,))
        until = time.monotonic_ns() + 200_000_000
        failed, fine = d.receive_lanes([dead, alive], 10, until, 0, wake[0])
        assert isinstance(failed.error, DriverError) and failed.acked == failed.received
        assert first.conn is None  # dropped: the next call connects again
        assert second.conn is not None  # its other connection went on
        assert fine.error is None and fine.received == fine.acked
        got = _until_empty(d, [dead, alive], wake[0])
        assert all(g.error is None for g in got)
        assert d.remaining().count == 0
        assert sorted(_seqs([failed, fine]) + _seqs(got)) == list(range(4))
    finally:
        admin.close()
        for c in (s, dead, alive):
            c.close()
        d.teardown()


def test_the_worker_loop_records_and_acks_every_message(cluster: PostgresCluster) -> None:
    d = _driver(cluster, "lanes_loop")
    s = d.sender()
    try:
        headers = worker_loop_headers(d, lambda: s.send(_messages(50)), 50)
        assert len(headers) == 50 * envelope.HEADER_BYTES
        assert d.remaining().count == 0
    finally:
        s.close()
        d.teardown()


def test_receivers_of_two_queues_in_one_call_each_read_their_own(
    cluster: PostgresCluster, wake: tuple[int, int]
) -> None:
    a, b = _driver(cluster, "lanes_qa"), _driver(cluster, "lanes_qb")
    sa, sb, ra, rb = a.sender(), b.sender(), a.receiver(), b.receiver()
    try:
        sa.send(_messages(3))
        sb.send([envelope.encode(9, i, 5, b"y") for i in range(4)])
        got_a: list[LaneReceipt] = []
        got_b: list[LaneReceipt] = []
        give_up = time.monotonic_ns() + PATIENCE_NS
        while (a.remaining().count or b.remaining().count) and time.monotonic_ns() < give_up:
            one, two = a.receive_lanes([ra, rb], 10, time.monotonic_ns() + 200_000_000, 0, wake[0])
            got_a.append(one)
            got_b.append(two)
        assert _seqs(got_a) == [0, 1, 2] and _seqs(got_b) == [0, 1, 2, 3]
        senders = {envelope.HEADER.unpack_from(g.headers, 0)[2] for g in got_b if g.headers}
        assert senders == {9}
    finally:
        for c in (sa, sb, ra, rb):
            c.close()
        a.teardown()
        b.teardown()


def test_a_receivers_connections_make_one_receipt_each_flag_at_its_own_header() -> None:
    def part(seqs: list[int], flagged: list[int], lens: list[int], short: int) -> LaneReceipt:
        headers = b"".join(envelope.encode(1, q, 5, b"p")[: envelope.HEADER_BYTES] for q in seqs)
        return LaneReceipt(
            headers,
            array.array("q", [100 + len(seqs)] * len(lens)).tobytes(),
            array.array("q", lens).tobytes(),
            array.array("q", flagged).tobytes(),
            len(seqs) + short,
            short,
            len(seqs),
            None,
        )

    err = DriverError("gone")
    a, b = part([0, 1, 2], [1], [3], 0), part([7, 8], [0, 1], [2], 1)
    c = part([], [], [], 0)._replace(error=err)
    one = merged([a, b, c])
    assert _seqs([one]) == [0, 1, 2, 7, 8]
    at = array.array("q", one.flagged).tolist()
    assert [envelope.HEADER.unpack_from(one.headers, 24 * i)[3] for i in at] == [1, 7, 8]
    assert array.array("q", one.lens).tolist() == [3, 2]
    assert array.array("q", one.recv_ns).tolist() == [103, 102]
    assert (one.received, one.short, one.acked, one.error) == (6, 1, 5, err)
    assert merged([a]) is a
    empty = part([], [], [], 0)
    assert merged([empty, b]) is b and merged([empty, empty]) is empty
