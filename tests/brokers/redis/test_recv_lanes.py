"""Redis receivers in lanes (the driver's receive_lanes: the receiver's Python path for its
own pending and idle entries, then mqlab/_recvpath.c's redis_receive) on the real 3-node
cluster: every entry once, acked and deleted by the time the call returns; entries a
receiver of the same name left pending come first, flagged; idle entries taken over,
flagged; a connection killed fails its receiver alone, whose entries come again; the
worker's loop records it."""

from __future__ import annotations

import array
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import LaneReceipt
from mqlab.brokers.redis.driver import RedisDriver
from tests.brokers.conftest import driver_on, worker_loop_headers
from tests.conftest import SharedLab

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        compiled.recv_module is None, reason="not built: tests/brokers/test_sendpath.py fails"
    ),
]
PATIENCE_NS = 60_000_000_000  # a bound on waiting for the server, never an expectation


@pytest.fixture
def driver(shared_lab: SharedLab) -> Iterator[RedisDriver]:
    with driver_on(shared_lab, "redis", "lanes") as d:
        yield d


@pytest.fixture
def wake() -> Iterator[tuple[int, int]]:
    rfd, wfd = os.pipe()
    yield rfd, wfd
    os.close(rfd)
    os.close(wfd)


def _messages(first: int, n: int) -> list[bytes]:
    return [envelope.encode(3, first + i, 5, b"x" * 40) for i in range(n)]


def _seqs(receipts: list[LaneReceipt]) -> list[int]:
    return sorted(
        envelope.HEADER.unpack_from(r.headers, i)[3]
        for r in receipts
        for i in range(0, len(r.headers), envelope.HEADER_BYTES)
    )


def _flagged(receipts: list[LaneReceipt]) -> list[int]:
    return sorted(
        envelope.HEADER.unpack_from(r.headers, envelope.HEADER_BYTES * i)[3]
        for r in receipts
        for i in array.array("q", r.flagged)
    )


def _until_empty(driver: RedisDriver, receivers: list[Any], wake_fd: int) -> list[LaneReceipt]:
    """receive_lanes, each call a short one, until the stream is empty (bounded)."""
    out: list[LaneReceipt] = []
    give_up = time.monotonic_ns() + PATIENCE_NS
    while driver.remaining().count and time.monotonic_ns() < give_up:
        until = time.monotonic_ns() + 200_000_000
        out += driver.receive_lanes(receivers, 10, until, 0, wake_fd)
    return out


def _send(driver: RedisDriver, messages: list[bytes]) -> None:
    s = driver.sender()
    try:
        for i in range(0, len(messages), 100):
            s.send(messages[i : i + 100])
    finally:
        s.close()


def test_receivers_in_lanes_on_this_machine(driver: RedisDriver) -> None:
    assert driver.receives_in_lanes()  # else the tests below test the Python path
    assert driver.receive_path() == "compiled-lanes"


def test_every_entry_once_acked_and_deleted_when_the_call_returns(
    driver: RedisDriver, wake: tuple[int, int]
) -> None:
    """1,000 entries and one shorter than a header over 3 receivers reading ahead 256:
    each once, none flagged, all acked, the stream empty and nothing pending."""
    _send(driver, [*_messages(0, 1000), b"short"])
    receivers = [driver.receiver() for _ in range(3)]
    try:
        got = _until_empty(driver, receivers, wake[0])
        assert [g.error for g in got if g.error is not None] == []
        assert _seqs(got) == list(range(1000))
        assert sum(g.received for g in got) == 1001 and sum(g.short for g in got) == 1
        assert sum(g.acked for g in got) == 1001
        assert sum(sum(array.array("q", g.lens)) for g in got) == 1000
        assert not any(g.flagged for g in got)
        assert sum(1 for g in got if g.received) >= 2  # more than one receiver got some
        left = driver.remaining()
        assert (left.count, left.in_flight) == (0, 0)
    finally:
        for r in receivers:
            r.close()


def test_a_receiver_first_gets_what_its_name_left_pending_flagged(
    driver: RedisDriver, wake: tuple[int, int]
) -> None:
    """A receiver takes 30 of 50 entries (its read-ahead read all 50) and closes without
    acking; the next receiver reuses its name, and in lanes gets those 50 first, flagged,
    then the 20 sent since, unflagged."""
    _send(driver, _messages(0, 50))
    first = driver.receiver()
    assert len(first.receive(30, 5.0)) == 30
    first.close()  # its name is free again, its entries still pending under it
    _send(driver, _messages(50, 20))
    lane = driver.receiver()
    try:
        got = _until_empty(driver, [lane], wake[0])
        assert [g.error for g in got if g.error is not None] == []
        assert _seqs(got) == list(range(70))
        assert _flagged(got) == list(range(50))
        assert sum(g.acked for g in got) == 70
        assert driver.remaining().count == 0
    finally:
        lane.close()


def test_idle_entries_of_another_receiver_are_taken_over_flagged(
    driver: RedisDriver, wake: tuple[int, int]
) -> None:
    """Entries read by a receiver that never acks them (it took 8 of 20, its read-ahead
    read all 20), idle past the visibility timeout (2 s here), are taken over by a
    receiver in lanes at a reclaim, flagged; the 10 sent since come unflagged."""
    _send(driver, _messages(0, 20))
    other = driver.receiver()
    assert len(other.receive(8, 5.0)) == 8
    _send(driver, _messages(20, 10))
    lane = driver.receiver()
    try:
        got = _until_empty(driver, [lane], wake[0])
        assert [g.error for g in got if g.error is not None] == []
        assert _seqs(got) == list(range(30))
        assert _flagged(got) == list(range(20))
    finally:
        lane.close()
        other.close()


def test_a_killed_connection_fails_its_receiver_alone_and_its_entries_come_again(
    driver: RedisDriver, wake: tuple[int, int]
) -> None:
    """While two receivers read, one's connection is killed by the server (CLIENT KILL):
    that receiver's call ends with the error, the other's does not; the next calls
    deliver everything, what the killed one had read but not acked flagged."""
    _send(driver, _messages(0, 3000))
    a, b = driver.receiver(), driver.receiver()
    admin = driver.connect()
    try:
        killer = threading.Timer(
            0.05, lambda: admin.client_kill_filter(_type="normal", skipme=True)
        )
        got: list[LaneReceipt] = []
        killer.start()
        # slow readers: one entry per read, so the kill lands while both are reading
        until = time.monotonic_ns() + 300_000_000
        got += driver.receive_lanes([a, b], 1, until, 0, wake[0])
        killer.join()
        errors = [g.error for g in got if g.error is not None]
        assert errors, "no receiver saw the kill"
        got += _until_empty(driver, [a, b], wake[0])
        assert sorted(set(_seqs(got))) == list(range(3000))
        assert driver.remaining().count == 0
        # what came twice was flagged the second time
        seqs = _seqs(got)
        twice = {q for q in seqs if seqs.count(q) > 1}
        assert twice <= set(_flagged(got))
    finally:
        admin.close()
        a.close()
        b.close()


def test_the_worker_loop_records_what_the_lanes_received(driver: RedisDriver) -> None:
    """run_receiver_lanes with two receivers until stop: every entry recorded once (the
    stats' headers), all acked, the stream empty."""
    headers = worker_loop_headers(driver, lambda: _send(driver, _messages(0, 500)), 500)
    assert len(headers) == 500 * envelope.HEADER_BYTES
    seqs = sorted(
        envelope.HEADER.unpack_from(headers, i)[3]
        for i in range(0, len(headers), envelope.HEADER_BYTES)
    )
    assert seqs == list(range(500))
    assert driver.remaining().count == 0
