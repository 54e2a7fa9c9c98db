"""RocketMQ receivers in lanes (the driver's receive_lanes with the remoting client,
``mqlab/brokers/rocketmq/lanes.py``). On the real 3-node cluster: every message once,
acked by the time the call returns and not delivered again; what a receiver read ahead
outside lanes handed out first; a stop before the call still takes a pop per receiver
and acks it; a receiver whose connection is cut fails alone and what it had not got
acked comes again, flagged; the worker's loop records it. Against a fake broker: a pop
that is never answered fails its lane in time, a busy master's refusal keeps the
connection for the lane's acks."""

from __future__ import annotations

import array
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import LaneReceipt
from mqlab.brokers.rocketmq import direct, lanes, popping, remoting
from mqlab.brokers.rocketmq.driver import RocketmqDriver
from tests.brokers.conftest import driver_on, worker_loop_headers
from tests.brokers.rocketmq.test_remoting import (
    Peer,
    fake_driver,
    read_all,
    response,
    stored_message,
)
from tests.conftest import SharedLab

PATIENCE_NS = 90_000_000_000  # a bound on waiting for the cluster, never an expectation
INVISIBLE_S = 5  # the contract target's invisible_duration_s


@pytest.fixture
def driver(shared_lab: SharedLab) -> Iterator[RocketmqDriver]:
    with driver_on(shared_lab, "rocketmq", "lanes") as d:
        assert d.settings.invisible_duration_s == INVISIBLE_S
        yield d


@pytest.fixture
def wake() -> Iterator[tuple[int, int]]:
    rfd, wfd = os.pipe()
    yield rfd, wfd
    os.close(rfd)
    os.close(wfd)


@pytest.fixture
def peer() -> Iterator[Peer]:
    p = Peer()
    yield p
    p.close()


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


def _send(driver: RocketmqDriver, messages: list[bytes], batch: int = 100) -> None:
    s = driver.sender()
    try:
        for i in range(0, len(messages), batch):
            s.send(messages[i : i + batch])
    finally:
        s.close()


def _until(
    driver: RocketmqDriver,
    receivers: list[Any],
    wake_fd: int,
    done: Callable[[list[LaneReceipt]], bool],
    max_messages: int = 10,
) -> list[LaneReceipt]:
    """receive_lanes, each call 300 ms, until ``done`` says so (bounded)."""
    out: list[LaneReceipt] = []
    give_up = time.monotonic_ns() + PATIENCE_NS
    while not done(out) and time.monotonic_ns() < give_up:
        until = time.monotonic_ns() + 300_000_000
        out += driver.receive_lanes(receivers, max_messages, until, 0, wake_fd)
    return out


def test_a_pops_headers_are_recorded_in_batches_short_ones_left_out_flags_renumbered() -> None:
    """Messages 0-6 of a pop, 2 and 5 shorter than a header, 3 and 6 redelivered, taken
    in batches of 3 after 4 headers recorded before: headers of 0 1 3 4 6, batches of
    2 (0 1), 2 (3 4) and 1 (6), flags at the kept headers' places (4+2 and 4+4)."""
    hb = envelope.HEADER_BYTES
    lane = lanes._Lane.__new__(lanes._Lane)
    lane.headers = bytearray(b"h" * 4 * hb)
    lane.recv_ns, lane.lens, lane.flagged = (array.array("q") for _ in range(3))
    lane.received = lane.short = 0
    kept = [bytes([i]) * hb for i in (0, 1, 3, 4, 6)]
    got = popping.PoppedHeaders(b"".join(kept), 7, [2, 5], [3, 6], {})
    lanes._record(lane, got, 3, 123)
    assert bytes(lane.headers[4 * hb :]) == b"".join(kept)
    assert list(lane.lens) == [2, 2, 1] and list(lane.recv_ns) == [123] * 3
    assert list(lane.flagged) == [4 + 2, 4 + 4]
    assert (lane.received, lane.short) == (7, 2)
    # with none short, as the pop came
    lanes._record(lane, popping.PoppedHeaders(b"z" * 4 * hb, 4, [], [0], {}), 3, 9)
    assert list(lane.lens)[3:] == [3, 1] and list(lane.flagged)[2:] == [9]


def test_a_write_its_socket_takes_in_part_is_written_whole_with_the_timeout() -> None:
    a, b = socket.socketpair()
    conn = remoting.Connection.__new__(remoting.Connection)
    conn.sock, conn.address = a, ("127.0.0.1", 0)
    a.setblocking(False)  # as while watched
    data = os.urandom(16 << 20)  # more than the socket pair's buffers hold
    got = bytearray()

    def read() -> None:
        while len(got) < len(data):
            got.extend(b.recv(1 << 20))

    reader = threading.Timer(0.2, read)  # nothing read at first: the send is partial
    reader.start()
    try:
        lanes._write(conn, data, 10.0)
        reader.join(10)
        assert bytes(got) == data
        assert a.gettimeout() == 0.0  # still unwatched only by the lane
    finally:
        a.close()
        b.close()


def test_receivers_in_lanes_with_the_remoting_client(
    driver: RocketmqDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert compiled.recv_module is not None  # built here (tests/brokers/test_sendpath.py)
    assert driver.receives_in_lanes() and driver.receive_path() == "compiled-lanes"
    monkeypatch.setattr(compiled, "recv_module", None)  # pop answers read in Python
    assert driver.receives_in_lanes() and driver.receive_path() == "lanes"
    grpc = RocketmqDriver(type(driver.settings)(client="grpc"), driver.endpoints, "not_set_up")
    assert not grpc.receives_in_lanes()  # asked nothing of the cluster
    assert grpc.receive_path() == "python"


@pytest.mark.integration
def test_every_message_once_acked_by_the_end_of_the_call_and_not_again(
    driver: RocketmqDriver, wake: tuple[int, int]
) -> None:
    """600 messages and one shorter than a header over 3 receivers: each once, in batches
    of at most 10, none flagged, all acked; past their invisible duration none comes
    again."""
    _send(driver, [*_messages(0, 600), b"short"])
    receivers = [driver.receiver() for _ in range(3)]
    try:
        got = _until(driver, receivers, wake[0], lambda g: sum(r.received for r in g) >= 601)
        assert [g.error for g in got if g.error is not None] == []
        assert _seqs(got) == list(range(600))
        assert sum(g.received for g in got) == 601 and sum(g.short for g in got) == 1
        assert sum(g.acked for g in got) == 601
        lens = [n for g in got for n in array.array("q", g.lens)]
        assert sum(lens) == 600 and max(lens) <= 10
        assert all(len(g.recv_ns) == len(g.lens) for g in got)
        assert not any(g.flagged for g in got)
        assert sum(1 for g in got if g.received) >= 2  # more than one receiver got some
        time.sleep(INVISIBLE_S + 3)  # an unacked message would be revived by now
        again = driver.receive_lanes(receivers, 10, time.monotonic_ns() + 1_000_000_000, 0, wake[0])
        assert [(g.received, g.error) for g in again] == [(0, None)] * 3
    finally:
        for r in receivers:
            r.close()


@pytest.mark.integration
def test_what_a_receiver_read_ahead_outside_lanes_is_handed_out_first(
    driver: RocketmqDriver, wake: tuple[int, int]
) -> None:
    """A batch of 40 (one queue); a receive outside lanes hands out 5 and keeps what its
    pop read ahead; in lanes that comes first, unflagged, then the rest, each once."""
    _send(driver, _messages(0, 40), batch=40)
    r = driver.receiver()
    try:
        first = r.receive(5, 5.0)
        assert len(first) == 5
        r.ack(first)
        held = [envelope.HEADER.unpack_from(m.body)[3] for m in r.ahead]
        assert held, "the pop read nothing ahead"
        got = _until(driver, [r], wake[0], lambda g: sum(x.received for x in g) >= 35)
        assert [g.error for g in got if g.error is not None] == []
        start = got[0].headers[: len(held) * envelope.HEADER_BYTES]
        assert _seqs([got[0]._replace(headers=start)]) == sorted(held)
        done = {envelope.HEADER.unpack_from(d.payload)[3] for d in first}
        assert _seqs(got) == sorted(set(range(40)) - done)
        assert not any(g.flagged for g in got) and not r.ahead
    finally:
        r.close()


@pytest.mark.integration
def test_a_stop_before_the_call_takes_one_pop_per_receiver_and_acks_it(
    driver: RocketmqDriver, wake: tuple[int, int]
) -> None:
    _send(driver, _messages(0, 200), batch=50)
    receivers = [driver.receiver() for _ in range(2)]
    os.write(wake[1], b"x")
    try:
        got = driver.receive_lanes(receivers, 10, time.monotonic_ns() + PATIENCE_NS, 0, wake[0])
        assert [g.error for g in got] == [None, None]
        assert all(g.received <= direct.MAX_POP and g.acked == g.received for g in got)
        assert sum(g.received for g in got) > 0
        assert len(set(_seqs(got))) == len(_seqs(got))  # no message twice
        # watched without a timeout during the call, each socket with one after it (the
        # last answer awaited set it to what was left of its wait)
        assert all((r.link.conn.sock.gettimeout() or 0) > 0 for r in receivers)
    finally:
        for r in receivers:
            r.close()


@pytest.mark.integration
def test_a_cut_connection_fails_its_receiver_alone_and_its_messages_come_again(
    driver: RocketmqDriver, wake: tuple[int, int]
) -> None:
    """While two receivers read 3,000 messages, one's connection is shut down: that
    receiver's call ends with the error, the other's does not; the next calls deliver
    everything (the cut one connects again), what came twice flagged."""
    _send(driver, _messages(0, 3000))
    a, b = driver.receiver(), driver.receiver()
    try:
        first = driver.receive_lanes([a, b], 10, time.monotonic_ns() + 300_000_000, 0, wake[0])
        assert [g.error for g in first] == [None, None]
        cut = a.link.conn
        assert cut is not None
        killer = threading.Timer(0.05, lambda: cut.sock.shutdown(socket.SHUT_RDWR))
        killer.start()
        got = driver.receive_lanes([a, b], 10, time.monotonic_ns() + 400_000_000, 0, wake[0])
        killer.join()
        assert got[0].error is not None and got[1].error is None, [g.error for g in got]
        got = first + got
        before = list(got)
        got += _until(driver, [a, b], wake[0], lambda g: set(_seqs(before + g)) >= set(range(3000)))
        assert set(_seqs(got)) == set(range(3000))
        seqs = _seqs(got)
        twice = {q for q in seqs if seqs.count(q) > 1}
        assert twice <= set(_flagged(got))
    finally:
        a.close()
        b.close()


@pytest.mark.integration
def test_the_worker_loop_records_what_the_lanes_received(driver: RocketmqDriver) -> None:
    """run_receiver_lanes with two receivers until stop: every message recorded once,
    all acked."""
    headers = worker_loop_headers(driver, lambda: _send(driver, _messages(0, 500)), 500)
    seqs = sorted(
        envelope.HEADER.unpack_from(headers, i)[3]
        for i in range(0, len(headers), envelope.HEADER_BYTES)
    )
    assert seqs == list(range(500))


# -- against a fake broker ------------------------------------------------------------------
POP_EXT = {"popTime": "1", "invisibleTime": "5000", "reviveQid": "0", "startOffsetInfo": "0 0 0"}


def test_a_pop_never_answered_fails_its_lane_in_time(
    peer: Peer, wake: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker takes the pop and says nothing: the lane fails once the pop's poll and
    the request timeout (1 s) are past, its connection dropped; the call returns."""
    monkeypatch.setattr(direct, "find_master", lambda ns, t: ("grp-a", peer.address))
    d = RocketmqDriver.__new__(RocketmqDriver)
    d.settings = fake_driver(request_timeout_s=1).settings
    r = direct.DirectReceiver(fake_driver(request_timeout_s=1), [("127.0.0.1", 1)])
    seen: list[Any] = []
    th = threading.Thread(target=lambda: seen.append(read_all(peer.accept(), 1)))
    th.start()
    t0 = time.monotonic()
    (got,) = d.receive_lanes([r], 10, time.monotonic_ns() + 200_000_000, 0, wake[0])
    took = time.monotonic() - t0
    th.join(5)
    assert [code for code, _, _, _ in seen[0]] == [remoting.POP_MESSAGE]
    assert "no answer to a pop in time" in str(got.error)
    assert got.received == 0 and r.link.conn is None
    assert took < 30  # bounded: it did not wait for ever


def test_a_busy_masters_refusal_fails_the_lane_and_its_acks_still_go(
    peer: Peer, wake: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pop brings 3 messages; the next is refused SYSTEM_BUSY (code 2): the lane ends
    with that error, and at the end of the call the 3 are acked on the same connection,
    which stays up."""
    monkeypatch.setattr(direct, "find_master", lambda ns, t: ("grp-a", peer.address))
    d = RocketmqDriver.__new__(RocketmqDriver)
    d.settings = fake_driver().settings
    r = direct.DirectReceiver(fake_driver(), [("127.0.0.1", 1)])
    body = b"".join(stored_message(envelope.encode(1, i, 5, b"p"), "t", 0, i) for i in range(3))
    seen: list[Any] = []

    def serve() -> None:
        c = peer.accept()
        (pop,) = read_all(c, 1)
        c.sendall(response(pop[1], 0, POP_EXT, body))
        ack, pop = read_all(c, 2)  # the acks written with the next pop
        seen.append((ack, pop))
        c.sendall(response(pop[1], remoting.SYSTEM_BUSY))
        c.sendall(response(ack[1], 0))

    th = threading.Thread(target=serve)
    th.start()
    (got,) = d.receive_lanes([r], 10, time.monotonic_ns() + 5_000_000_000, 0, wake[0])
    th.join(5)
    assert "code 2" in str(got.error)
    assert (got.received, got.acked) == (3, 3)
    assert _seqs([got]) == [0, 1, 2]
    ((ack, pop),) = seen
    assert (ack[0], pop[0]) == (remoting.BATCH_ACK_MESSAGE, remoting.POP_MESSAGE)
    assert r.link.conn is not None  # kept: a busy master is still the master
    r.close()


def test_once_woken_a_call_waits_for_its_pops_without_spinning(
    peer: Peer, wake: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told to end before it starts, a call still sends its first pop and waits for the
    answer (here 0.5 s later: nothing popped), watching the wake fd no more: a handful of
    selects, not one per turn of a loop while the fd stays readable."""
    monkeypatch.setattr(direct, "find_master", lambda ns, t: ("grp-a", peer.address))
    selects = []

    class Counting(selectors.DefaultSelector):
        def select(self, timeout: float | None = None) -> Any:
            selects.append(timeout)
            return super().select(timeout)

    monkeypatch.setattr(lanes.selectors, "DefaultSelector", Counting)
    d = RocketmqDriver.__new__(RocketmqDriver)
    d.settings = fake_driver().settings
    r = direct.DirectReceiver(fake_driver(), [("127.0.0.1", 1)])

    def serve() -> None:
        c = peer.accept()
        (pop,) = read_all(c, 1)
        time.sleep(0.5)
        c.sendall(response(pop[1], remoting.POLLING_TIMEOUT))

    th = threading.Thread(target=serve)
    th.start()
    os.write(wake[1], b"x")
    (got,) = d.receive_lanes([r], 10, time.monotonic_ns() + 5_000_000_000, 0, wake[0])
    th.join(5)
    assert (got.received, got.error) == (0, None)
    assert len(selects) <= 5, len(selects)
    r.close()
