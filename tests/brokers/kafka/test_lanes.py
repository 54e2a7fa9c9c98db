"""Kafka receivers in lanes (``mqlab/brokers/kafka/lanes.py``): the record batches read in
C (``mqlab._recvpath.kafka_records``) against batches written here by an encoder of this
file's own; the Fetch request and answer (``fetch.py``). On the real 3-node cluster:
every message once, acked and committed by the time the receivers close; a receiver
joining between calls takes partitions over with nothing lost or delivered twice; a cut
connection fails its receiver alone and loses nothing; deliveries below the delivered
mark a commit carries come flagged; the worker's loop records what the lanes received."""

from __future__ import annotations

import array
import os
import select
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import LaneReceipt
from mqlab.brokers.kafka import fetch, lanes
from mqlab.brokers.kafka.config import bootstrap
from mqlab.brokers.kafka.driver import KafkaDriver
from mqlab.brokers.kafka.offsets import mark_metadata
from mqlab.errors import DriverError
from tests.brokers.conftest import driver_on, worker_loop_headers
from tests.conftest import SharedLab

recvpath: Any = compiled.recv_module
pytestmark = pytest.mark.skipif(
    recvpath is None, reason="tests/brokers/test_sendpath.py fails first"
)
HB = envelope.HEADER_BYTES
PATIENCE_S = 90.0  # a bound on waiting for the cluster, never an expectation


# -- record batches, written here ----------------------------------------------------------
def zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = b""
    while z >= 0x80:
        out += bytes([z & 0x7F | 0x80])
        z >>= 7
    return out + bytes([z])


def record(delta: int, value: bytes | None, key: bytes | None = None) -> bytes:
    body = b"\x00" + zigzag(0) + zigzag(delta)
    body += zigzag(-1) if key is None else zigzag(len(key)) + key
    body += zigzag(-1) if value is None else zigzag(len(value)) + value
    body += zigzag(1) + zigzag(1) + b"h" + zigzag(2) + b"hv"  # one header
    return zigzag(len(body)) + body


def batch(
    base: int, values: list[bytes | None], deltas: list[int] | None = None, attrs: int = 0
) -> bytes:
    deltas = deltas if deltas is not None else list(range(len(values)))
    records = b"".join(record(d, v) for d, v in zip(deltas, values, strict=True))
    last = max(deltas, default=0)
    rest = struct.pack(">ibIhiqqqhii", 0, 2, 0, attrs, last, 0, 0, -1, -1, -1, len(values))
    rest += records
    return struct.pack(">qi", base, len(rest)) + rest


def msg(seq: int, size: int = 40) -> bytes:
    return envelope.encode(3, seq, 5, b"x" * (size - HB))


def seqs_of(headers: bytes) -> list[int]:
    return [envelope.HEADER.unpack_from(headers, i)[3] for i in range(0, len(headers), HB)]


def test_records_read_from_the_fetch_offset_short_and_null_values_counted() -> None:
    data = batch(100, [msg(0), msg(1), b"short", None, msg(2, 24)]) + batch(105, [msg(3)])
    headers, received, short, flagged, end, first, skipped, hole = recvpath.kafka_records(
        data, 101, -1, HB
    )
    assert seqs_of(headers) == [1, 2, 3] and len(headers) == 3 * HB
    assert (received, short, flagged, end, first, skipped, hole) == (5, 2, 0, 106, 101, 0, -1)


def test_records_at_or_below_the_mark_are_the_flagged_first_ones() -> None:
    data = batch(0, [msg(i) for i in range(6)])
    got = recvpath.kafka_records(data, 2, 3, HB)
    assert seqs_of(got[0]) == [2, 3, 4, 5] and got[3] == 2  # offsets 2 and 3


def test_a_batch_cut_short_is_left_for_the_next_fetch() -> None:
    whole, cut = batch(0, [msg(0), msg(1)]), batch(2, [msg(2)])
    got = recvpath.kafka_records(whole + cut[:-7], 0, -1, HB)
    assert seqs_of(got[0]) == [0, 1] and got[4] == 2
    assert recvpath.kafka_records(cut[:11], 2, -1, HB)[1:5] == (0, 0, 0, 2)


def test_control_batches_are_passed_over_and_missing_offsets_counted() -> None:
    control = batch(3, [b"\x00\x00\x00\x00\x00\x00"], attrs=0x20)
    data = batch(0, [msg(0), msg(1), msg(2)]) + control + batch(4, [msg(4), msg(7)], [0, 3])
    headers, received, _, _, end, _, skipped, hole = recvpath.kafka_records(data, 0, -1, HB)
    assert seqs_of(headers) == [0, 1, 2, 4, 7] and received == 5 and end == 8
    assert (skipped, hole) == (2, 5)  # offsets 5 and 6
    assert recvpath.kafka_records(batch(10, [msg(12)], [2]), 10, -1, HB)[6:] == (2, 10)
    # a batch whose last offsets hold no record (lastOffsetDelta past its records)
    tail = batch(0, [msg(0), msg(1)])
    tail = tail[:23] + struct.pack(">i", 3) + tail[27:]
    assert recvpath.kafka_records(tail, 0, -1, HB)[4:] == (4, 0, 2, 2)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (batch(0, [msg(0)], attrs=2), "compressed"),
        (batch(0, [msg(0)])[:16] + b"\x01" + batch(0, [msg(0)])[17:], "magic 2"),
        (struct.pack(">qi", 0, 5) + b"x" * 5, "length out of range"),
        (batch(0, [msg(0)])[:57] + struct.pack(">i", 2) + batch(0, [msg(0)])[61:], "record"),
    ],
)
def test_what_the_reader_refuses(data: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        recvpath.kafka_records(data, 0, -1, HB)


# -- the Fetch request and its answer --------------------------------------------------------
def test_a_fetch_request_is_version_4_of_the_given_partitions() -> None:
    req = fetch.fetch_request(7, b"q", [(0, 5), (3, 9)], 100, 1 << 20, 1 << 24)
    (size,) = struct.unpack_from(">i", req)
    assert size == len(req) - 4
    assert struct.unpack_from(">hhih", req, 4) == (1, 4, 7, 5)
    assert req[14:19] == b"mqlab"
    assert struct.unpack_from(">iiiibih", req, 19) == (-1, 100, 1, 1 << 24, 0, 1, 1)
    assert req[42:43] == b"q" and len(req) == 43 + 4 + 2 * 16
    assert struct.unpack_from(">iiqiiqi", req, 43) == (2, 0, 5, 1 << 20, 3, 9, 1 << 20)


def answer(correlation: int, parts: list[tuple[int, int, bytes | None, int]]) -> bytes:
    body = struct.pack(">iii", correlation, 0, 1) + struct.pack(">h", 1) + b"q"
    body += struct.pack(">i", len(parts))
    for p, error, records, aborted in parts:
        body += struct.pack(">ihqqi", p, error, 50, 50, aborted if aborted else -1)
        body += struct.pack(">qq", 1, 2) * aborted
        body += struct.pack(">i", -1) if records is None else struct.pack(">i", len(records))
        body += records or b""
    return body


def test_an_answer_is_read_into_its_partitions() -> None:
    got = fetch.parse_answer(answer(3, [(0, 0, b"abc", 2), (1, 6, None, 0)]), 3)
    assert [(d.partition, d.error, d.high_watermark, bytes(d.records)) for d in got] == [
        (0, 0, 50, b"abc"),
        (1, 6, 50, b""),
    ]
    with pytest.raises(DriverError, match="answer 3 where 4 was due"):
        fetch.parse_answer(answer(3, []), 4)
    with pytest.raises(DriverError, match="malformed|cut short"):
        fetch.parse_answer(answer(3, [(0, 0, b"abc", 0)])[:-2], 3)


@pytest.fixture
def unreachable() -> Iterator[tuple[str, int]]:
    """A loopback address whose connects hang: its listener's backlog full, further SYNs
    are dropped (as by a partition), until the fixture ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    filling = []
    try:
        for _ in range(3):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(address)
            filling.append(s)
        time.sleep(0.2)
        yield address
    finally:
        for s in filling:
            s.close()
        listener.close()


def test_a_connection_is_made_without_blocking(unreachable: tuple[str, int]) -> None:
    started = time.monotonic()
    conn = fetch.BrokerConn(*unreachable, 10.0)
    try:
        assert time.monotonic() - started < 1.0  # not the 10 s a blocking connect waits
        assert conn.connecting
        assert 9e9 < conn.connect_due_ns - time.monotonic_ns() <= 10e9
    finally:
        conn.close()
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: refused
    try:
        refused = fetch.BrokerConn("127.0.0.1", port, 2.0)
    except DriverError as e:  # refused at once
        assert "cannot connect" in str(e)
    else:
        try:
            deadline = time.monotonic() + 5
            while not select.select([], [refused.sock], [], 0.1)[1]:
                assert time.monotonic() < deadline
            with pytest.raises(DriverError, match="cannot connect to 127.0.0.1"):
                refused.connected()
        finally:
            refused.close()


def test_a_connection_reads_an_answer_split_anywhere() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    conn = fetch.BrokerConn("127.0.0.1", listener.getsockname()[1], 2.0)
    peer, _ = listener.accept()
    select.select([], [conn.sock], [], 2.0)
    conn.connected()
    try:
        whole = answer(1, [(0, 0, b"x" * 100, 0)])
        framed = struct.pack(">i", len(whole)) + whole
        peer.sendall(framed[:3])
        time.sleep(0.05)
        assert conn.read() is None
        peer.sendall(framed[3:])
        time.sleep(0.05)
        assert conn.read() == whole
        peer.sendall(framed + b"more")
        time.sleep(0.05)
        with pytest.raises(DriverError, match="bytes after"):
            conn.read()
        peer.close()
        time.sleep(0.05)
        with pytest.raises(DriverError, match="closed"):
            conn.buf.clear()
            conn.read()
    finally:
        conn.close()
        listener.close()


# -- on the real cluster -------------------------------------------------------------------
@pytest.fixture
def driver(shared_lab: SharedLab) -> Iterator[KafkaDriver]:
    with driver_on(shared_lab, "kafka", "lanes") as d:
        yield d


@pytest.fixture
def wake() -> Iterator[tuple[int, int]]:
    rfd, wfd = os.pipe()
    yield rfd, wfd
    os.close(rfd)
    os.close(wfd)


def _send(driver: KafkaDriver, messages: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap(driver.endpoints), "acks": "all"})
    for i, m in enumerate(messages):
        p.produce(driver.topic, m, partition=i % driver.settings.partitions)
    assert p.flush(30) == 0


def _seqs(receipts: list[LaneReceipt]) -> list[int]:
    return sorted(q for r in receipts for q in seqs_of(r.headers))


def _until(
    driver: KafkaDriver,
    receivers: list[Any],
    wake_fd: int,
    done: Callable[[list[LaneReceipt]], bool],
) -> list[LaneReceipt]:
    """receive_lanes calls of 0.3 s until ``done`` of all they got (at most PATIENCE_S)."""
    got: list[LaneReceipt] = []
    give_up = time.monotonic() + PATIENCE_S
    while not done(got) and time.monotonic() < give_up:
        until = time.monotonic_ns() + 300_000_000
        got += driver.receive_lanes(receivers, 10, until, 0, wake_fd)
    return got


def test_the_real_kafka_receivers_go_in_lanes(driver: KafkaDriver) -> None:
    assert driver.receives_in_lanes() and driver.receive_path() == "compiled-lanes"
    snappy = KafkaDriver(
        type(driver.settings)(compression="snappy"), driver.endpoints, "not_set_up"
    )
    assert not snappy.receives_in_lanes() and snappy.receive_path() == "python"


@pytest.mark.integration
def test_every_message_once_acked_and_committed_by_the_close(
    driver: KafkaDriver, wake: tuple[int, int]
) -> None:
    """600 messages and one shorter than a header over the 4 partitions, 3 receivers in
    lanes: each once, none flagged, all acked; once the receivers close, the group's
    commits leave nothing behind."""
    _send(driver, [*(msg(i) for i in range(600)), b"short"])
    receivers = [driver.receiver() for _ in range(3)]
    try:
        got = _until(driver, receivers, wake[0], lambda g: sum(r.received for r in g) >= 601)
        assert [g.error for g in got if g.error is not None] == []
        assert _seqs(got) == list(range(600))
        assert sum(g.received for g in got) == 601 and sum(g.short for g in got) == 1
        assert sum(g.acked for g in got) == 601
        assert all(len(g.recv_ns) == len(g.lens) for g in got)
        assert sum(n for g in got for n in array.array("q", g.lens)) == 600
        assert not any(g.flagged for g in got)
        assert sum(1 for g in got if g.received) >= 2  # more than one receiver got some
    finally:
        for r in receivers:
            r.close()
    assert driver.remaining().count == 0


@pytest.mark.integration
def test_a_receiver_joining_between_calls_takes_partitions_over_losing_nothing(
    driver: KafkaDriver, wake: tuple[int, int]
) -> None:
    _send(driver, [msg(i) for i in range(2000)])
    a = driver.receiver()
    b = None
    try:
        got = driver.receive_lanes([a], 10, time.monotonic_ns() + 200_000_000, 0, wake[0])
        b = driver.receiver()  # a rebalance: a's revoke commits what it took
        got += _until(driver, [a, b], wake[0], lambda g: len(_seqs(got + g)) >= 2000)
        assert [g.error for g in got if g.error is not None] == []
        assert _seqs(got) == list(range(2000))  # each once: none lost, none twice
    finally:
        a.close()
        if b is not None:
            b.close()


@pytest.mark.integration
def test_a_cut_connection_fails_its_receiver_alone_and_loses_nothing(
    driver: KafkaDriver, wake: tuple[int, int]
) -> None:
    _send(driver, [msg(i) for i in range(3000)])
    a, b = driver.receiver(), driver.receiver()
    try:
        first = driver.receive_lanes([a, b], 10, time.monotonic_ns() + 200_000_000, 0, wake[0])
        assert [g.error for g in first] == [None, None]
        assert a.conns, "a fetched nothing"
        cut = next(iter(a.conns.values()))
        killer = threading.Timer(0.02, lambda: cut.sock.shutdown(socket.SHUT_RDWR))
        killer.start()
        got = driver.receive_lanes([a, b], 10, time.monotonic_ns() + 400_000_000, 0, wake[0])
        killer.join()
        assert got[0].error is not None and got[1].error is None, [g.error for g in got]
        assert not a.conns  # dropped: the next call connects again
        got = first + got
        got += _until(driver, [a, b], wake[0], lambda g: len(_seqs(got + g)) >= 3000)
        assert _seqs(got) == list(range(3000))
    finally:
        a.close()
        b.close()


@pytest.mark.integration
def test_a_leader_not_reached_holds_its_receiver_alone_then_fails_it(
    driver: KafkaDriver, wake: tuple[int, int], unreachable: tuple[str, int]
) -> None:
    """A receiver whose leaders cannot be reached (their address's connects hang, as in a
    partition) does not hold the call nor the other receiver: the call ends on time, the
    other receives; its connection, still being made, is kept for the next call with its
    deadline; once that passes, it fails, looks its leaders up again and loses nothing."""
    _send(driver, [msg(i) for i in range(2000)])
    a, b = driver.receiver(), driver.receiver()
    try:
        got = driver.receive_lanes([a, b], 10, time.monotonic_ns() + 200_000_000, 0, wake[0])
        assert [g.error for g in got] == [None, None]
        with a.lock:
            assert a.owned and b.owned, "the group gave one of them nothing"
            for conn in a.conns.values():
                conn.close()
            a.conns.clear()
            a.leaders = dict.fromkeys(a.leaders, unreachable)
        _send(driver, [msg(i) for i in range(2000, 3000)])  # b's share of these comes now
        started = time.monotonic()
        more = driver.receive_lanes([a, b], 10, time.monotonic_ns() + 1_000_000_000, 0, wake[0])
        assert time.monotonic() - started < 5.0  # 1 s asked, not a blocking connect's 10
        assert [g.error for g in more] == [None, None]
        assert more[0].received == 0 and more[1].received > 0
        (pending,) = a.conns.values()
        assert pending.connecting and pending.pending is None  # kept, nothing in flight
        pending.connect_due_ns = time.monotonic_ns()  # its deadline passed
        failed = driver.receive_lanes([a, b], 10, time.monotonic_ns() + 300_000_000, 0, wake[0])
        assert "no connection to 127.0.0.1" in str(failed[0].error), failed[0].error
        assert failed[1].error is None
        assert not a.conns and not a.leaders  # dropped: looked up again by the next call
        got += more + failed
        got += _until(driver, [a, b], wake[0], lambda g: len(_seqs(got + g)) >= 3000)
        assert _seqs(got) == list(range(3000))  # each once: none lost, none twice
    finally:
        a.close()
        b.close()


@pytest.mark.integration
def test_a_leader_lookup_that_hangs_holds_only_its_receiver(
    driver: KafkaDriver, wake: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receiver whose leaders must be looked up again, the lookup answering only after
    3 s (a broker slow to give its metadata): the call of 1 s ends on time and the other
    receiver receives meanwhile; the lookup goes on on its thread and, once it answered,
    the receiver fetches again, losing nothing."""
    _send(driver, [msg(i) for i in range(2000)])
    a, b = driver.receiver(), driver.receiver()
    slow = threading.Event()
    real = lanes._leaders

    def leaders(r: Any) -> dict[int, tuple[str, int]]:
        if r is a:
            slow.set()
            time.sleep(3.0)
        return real(r)

    try:
        got = driver.receive_lanes([a, b], 10, time.monotonic_ns() + 200_000_000, 0, wake[0])
        assert [g.error for g in got] == [None, None]
        monkeypatch.setattr(lanes, "_leaders", leaders)
        with a.lock:
            assert a.owned and b.owned, "the group gave one of them nothing"
            for conn in a.conns.values():
                conn.close()
            a.conns.clear()
            a.leaders.clear()  # looked up again, slowly
        _send(driver, [msg(i) for i in range(2000, 3000)])
        started = time.monotonic()
        more = driver.receive_lanes([a, b], 10, time.monotonic_ns() + 1_000_000_000, 0, wake[0])
        assert time.monotonic() - started < 2.5  # 1 s asked, not the lookup's 3
        assert slow.is_set() and a.lookup is not None  # under way on its thread
        assert [g.error for g in more] == [None, None]
        assert more[0].received == 0 and more[1].received > 0
        got += more
        got += _until(driver, [a, b], wake[0], lambda g: len(_seqs(got + g)) >= 3000)
        assert [g.error for g in got if g.error is not None] == []
        assert _seqs(got) == list(range(3000))  # each once: none lost, none twice
        assert a.leaders  # the lookup's answer arrived and was used
    finally:
        a.close()
        b.close()


@pytest.mark.integration
def test_deliveries_at_or_below_a_committed_mark_come_flagged(
    driver: KafkaDriver, wake: tuple[int, int]
) -> None:
    """The group's offsets set back to 0 with each partition's delivered mark kept (as
    a receiver that died after committing its mark but before its offsets would leave
    them): a receiver in lanes gets everything again, flagged up to the marks."""
    _send(driver, [msg(i) for i in range(40)])
    a = driver.receiver()
    try:
        got = _until(driver, [a], wake[0], lambda g: len(_seqs(g)) >= 40)
        assert _seqs(got) == list(range(40)) and not any(g.flagged for g in got)
    finally:
        a.close()
    c = Consumer({"bootstrap.servers": bootstrap(driver.endpoints), "group.id": driver.group})
    try:
        parts = range(driver.settings.partitions)
        marks = {
            tp.partition: tp
            for tp in c.committed([TopicPartition(driver.topic, p) for p in parts], timeout=10)
        }
        assert all(tp.offset == 10 for tp in marks.values())  # 40 over 4 partitions
        back = [TopicPartition(driver.topic, p, 0, metadata=mark_metadata(7)) for p in parts]
        c.commit(offsets=back, asynchronous=False)
    finally:
        c.close()
    b = driver.receiver()
    try:
        again = _until(driver, [b], wake[0], lambda g: len(_seqs(g)) >= 40)
        assert _seqs(again) == list(range(40))
        flagged = sorted(
            envelope.HEADER.unpack_from(g.headers, HB * i)[3]
            for g in again
            for i in array.array("q", g.flagged)
        )
        assert flagged == sorted(q for q in range(40) if q // 4 <= 7)  # offsets 0 .. 7
    finally:
        b.close()


@pytest.mark.integration
def test_once_woken_a_call_waits_for_its_fetches_without_spinning(
    driver: KafkaDriver, wake: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told to end before it starts, a call still sends the fetches of the partitions it
    knows and waits for their answers (an empty topic: each long-polls
    ``fetch_wait_max_ms``), watching the wake fd no more: a handful of selects, not one
    per turn of a loop while the fd stays readable."""
    selects = []

    class Counting(selectors.DefaultSelector):
        def select(self, timeout: float | None = None) -> Any:
            selects.append(timeout)
            return super().select(timeout)

    r = driver.receiver()
    try:
        # first its partitions, their leaders and offsets (looked up on a lookup thread)
        give_up = time.monotonic() + PATIENCE_S
        while not (r.owned and r.conns) and time.monotonic() < give_up:
            driver.receive_lanes([r], 10, time.monotonic_ns() + 300_000_000, 0, wake[0])
        assert r.owned and r.conns, "no partition fetched"
        monkeypatch.setattr(lanes.selectors, "DefaultSelector", Counting)
        os.write(wake[1], b"x")
        (got,) = driver.receive_lanes([r], 10, time.monotonic_ns() + 5_000_000_000, 0, wake[0])
        assert (got.received, got.error) == (0, None)
        assert r.conns and all(c.pending is None for c in r.conns.values())
        assert len(selects) <= 6, selects
    finally:
        r.close()


@pytest.mark.integration
def test_the_worker_loop_records_what_the_lanes_received(driver: KafkaDriver) -> None:
    headers = worker_loop_headers(driver, lambda: _send(driver, [msg(i) for i in range(500)]), 500)
    assert sorted(seqs_of(headers)) == list(range(500))
