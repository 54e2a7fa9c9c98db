"""The compiled send path (mqlab/_sendpath.c) on a socket pair: what it writes, and how
it reads every kind of reply (split, errors, nil, large, unexpected), closes and
timeouts. The real server's side is in tests/brokers/redis/test_server.py."""

from __future__ import annotations

import array
import errno
import itertools
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import hiredis
import pytest
import redis

from mqlab import envelope
from mqlab.brokers.base import Endpoints, Lane, NodeEndpoint
from mqlab.brokers.redis import driver as redis_driver
from mqlab.brokers.redis import sender as redis_sender
from mqlab.brokers.redis import wire as redis_wire
from mqlab.errors import DriverError

sendpath: Any = redis_sender._sendpath  # None when the install did not build it
MAGIC, VERSION = envelope.MAGIC, envelope.VERSION


def test_the_compiled_send_path_is_built_here() -> None:
    """The project's install builds it (setup.py); a missing compiler would show here."""
    assert sendpath is not None and redis_driver.SEND_PATH == "compiled"


def test_the_compiled_receive_path_is_built_here() -> None:
    """mqlab._recvpath likewise: its tests skip where it is not built, so this fails."""
    from mqlab.brokers import compiled

    assert compiled.recv_module is not None


class Peer:
    """The other end of a socket pair: reads what the send path wrote, answers with
    ``reply`` (written in ``chunk``-byte pieces)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.got = bytearray()

    def serve(self, expect: int, reply: bytes, chunk: int = 1 << 20) -> threading.Thread:
        def run() -> None:
            while len(self.got) < expect:
                data = self.sock.recv(1 << 20)
                if not data:
                    return
                self.got += data
            for i in range(0, len(reply), chunk):
                self.sock.sendall(reply[i : i + chunk])

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, Peer]]:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 2, 0))
    try:
        yield a, Peer(b)
    finally:
        a.close()
        b.close()


def _framed(size: int = 200) -> envelope.Framed:
    return envelope.Framed(envelope.PayloadPool(size, pool_size=3, seed=2), b"<", b">\r\n")


def _spec(f: envelope.Framed, sender: int, trailer: bytes = b"") -> bytes:
    extra = 1 if trailer else 0
    return redis_sender.SPEC.pack(f.prefix_len, f.frame, MAGIC, VERSION, sender, extra) + trailer


def _call(
    sock: socket.socket, f: envelope.Framed, n: int, first: int, trailer: bytes = b""
) -> tuple[int, int, str | None]:
    t = f.template(first, n)
    result: tuple[int, int, str | None] = sendpath.redis_batch(
        sock.fileno(), t, _spec(f, 4, trailer), n, first, 99
    )
    return result


XADD_OK = b"$15\r\n1700000000000-0\r\n"


def test_it_writes_the_framed_batch_and_its_trailer_and_reads_the_replies(
    pair: tuple[socket.socket, Peer],
) -> None:
    sock, peer = pair
    f = _framed()
    for first, n in ((0, 5), (5, 2), (7, 6)):
        peer.got.clear()
        want = bytes(_framed().batch(4, first, n, 99)) + b"WAIT"
        peer.serve(len(want), XADD_OK * n + b":2\r\n")
        assert _call(sock, f, n, first, b"WAIT") == (0, 2, None)
        assert bytes(peer.got) == want
    assert [envelope.decode(m) for m in envelope.encode_batch(4, 7, 6, 99, f.pool)] == [
        (4, s, 99) for s in range(7, 13)
    ]


def test_replies_split_anywhere_nil_and_long_bulk_replies_are_read(
    pair: tuple[socket.socket, Peer],
) -> None:
    sock, peer = pair
    f = _framed()
    big = b"x" * 40_000  # longer than the reader's 16 KiB buffer: passed over
    reply = XADD_OK + b"$-1\r\n" + b"+OK\r\n" + b"$40000\r\n" + big + b"\r\n" + XADD_OK
    peer.serve(5 * f.frame, reply, chunk=1)  # one byte at a time
    assert _call(sock, f, 5, 0) == (0, -1, None)


def test_an_error_reply_is_reported_after_every_reply_was_read(
    pair: tuple[socket.socket, Peer],
) -> None:
    sock, peer = pair
    f = _framed()
    reply = XADD_OK + b"-WRONGTYPE Operation against a key\r\n" + b"-ERR second\r\n" + XADD_OK
    peer.serve(4 * f.frame, reply)
    assert _call(sock, f, 4, 0) == (1, -1, "WRONGTYPE Operation against a key")
    peer.got.clear()
    peer.serve(f.frame, XADD_OK)  # the connection is still in step
    assert _call(sock, f, 1, 4) == (0, -1, None)


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (b"*1\r\n" + XADD_OK, "an unexpected reply of type '*'"),
        (XADD_OK + XADD_OK + b"+extra\r\n", "bytes after the last reply"),
        (b"$abc\r\n", "a malformed '$' reply"),
        (b"+OK\n", "a reply line without CRLF"),
        (b"-" + b"E" * 20_000 + b"\r\n", "a reply line longer than 16384 bytes"),
    ],
)
def test_replies_out_of_step_are_a_protocol_failure(
    pair: tuple[socket.socket, Peer], reply: bytes, why: str
) -> None:
    sock, peer = pair
    f = _framed()
    peer.serve(2 * f.frame, reply)
    status, _, message = _call(sock, f, 2, 0)
    assert status == 4 and message is not None and why in message


def test_a_closed_connection_and_a_silent_server(pair: tuple[socket.socket, Peer]) -> None:
    sock, peer = pair
    f = _framed()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 200_000))
    peer.serve(f.frame, b"")  # reads the batch, never answers
    assert _call(sock, f, 1, 0) == (2, -1, None)
    peer.sock.shutdown(socket.SHUT_WR)
    assert _call(sock, f, 1, 1) == (3, -1, "connection closed by the server")


def test_a_batch_larger_than_its_template_is_refused(pair: tuple[socket.socket, Peer]) -> None:
    sock, _ = pair
    f = _framed()
    t = f.template(0, 2)
    with pytest.raises(ValueError, match="does not fit"):
        sendpath.redis_batch(sock.fileno(), t, _spec(f, 1), 3, 0, 0)
    with pytest.raises(ValueError, match="does not fit"):
        sendpath.redis_batch(sock.fileno(), t, b"short", 1, 0, 0)


# -- the Redis sender on either path --------------------------------------------------------
class _PairWire(redis_wire.SendWire):
    """The sender's wire with a socket pair's end as its connection."""

    def __init__(self, sock: socket.socket):
        super().__init__(None, 2.0)  # type: ignore[arg-type]
        self.pair_sock = sock

    def _connect(self) -> socket.socket:
        self.sock, self.fd = self.pair_sock, self.pair_sock.fileno()
        self.reader = hiredis.Reader(replyError=redis.ResponseError)
        return self.pair_sock

    def reset(self) -> None:
        self.sock, self.fd = None, -1


def _sender(wait: int, streams: int = 1) -> redis_sender.RedisSender:
    settings = redis_driver.Settings(streams=streams, wait_replicas=wait)
    endpoints = Endpoints("redis", (NodeEndpoint(0, "127.0.0.1", 1),))
    s = redis_sender.RedisSender(redis_driver.RedisDriver(settings, endpoints, "q"))
    s.next_key = 0
    return s


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_the_sender_writes_the_same_bytes_on_either_path(
    pair: tuple[socket.socket, Peer], monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    if not compiled:
        monkeypatch.setattr(redis_sender, "_sendpath", None)
    sock, peer = pair
    pool = envelope.PayloadPool(300, pool_size=4, seed=9)
    s = _sender(wait=1, streams=2)
    s.wire = _PairWire(sock)
    generic = b""
    seq = 0
    for n in (10, 3, 10, 12):
        key = s.keys[s.next_key]
        head = s.heads[key]
        msgs = envelope.encode_batch(6, seq, n, 5, pool)
        want = b"".join(head + b"$300\r\n" + m + b"\r\n" for m in msgs) + s.wait_command
        generic += want
        peer.serve(len(peer.got) + len(want), XADD_OK * n + b":1\r\n")
        s.send_stamped(6, seq, n, 5, pool)
        seq += n
    assert bytes(peer.got) == generic


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (XADD_OK * 2 + b":0\r\n", "WAIT 1: only 0 replicas acknowledged"),
        (XADD_OK + b"-READONLY You can't write\r\n:1\r\n", "send failed: READONLY"),
    ],
)
def test_the_sender_fails_a_batch_in_one_line_on_either_path(
    pair: tuple[socket.socket, Peer],
    monkeypatch: pytest.MonkeyPatch,
    compiled: bool,
    reply: bytes,
    match: str,
) -> None:
    if not compiled:
        monkeypatch.setattr(redis_sender, "_sendpath", None)
    sock, peer = pair
    s = _sender(wait=1)
    s.wire = _PairWire(sock)
    peer.serve(1, reply)
    with pytest.raises(DriverError, match=match):
        s.send_stamped(1, 0, 2, 0, envelope.PayloadPool(64, seed=1))


# -- several senders from one thread (redis_lanes) ------------------------------------------
class Responder:
    """A Redis stand-in on a socket pair's end for one lane: reads each batch whole (its
    ``sizes`` known), then answers it with ``answer(i, n)``; keeps what it read."""

    def __init__(self, sock: socket.socket, frame: int, trailer: int, sizes: list[int]):
        self.sock, self.got = sock, bytearray()
        self.thread = threading.Thread(target=self._run, args=(frame, trailer, sizes))
        self.thread.daemon = True
        self.answer = lambda i, n: XADD_OK * n + (b":1\r\n" if trailer else b"")

    def _run(self, frame: int, trailer: int, sizes: list[int]) -> None:
        try:
            self._serve(frame, trailer, sizes)
        except OSError:  # the test is over: its socket closed under a read
            return

    def _serve(self, frame: int, trailer: int, sizes: list[int]) -> None:
        want = 0
        for i, n in enumerate(sizes):
            want += n * frame + trailer
            while len(self.got) < want:
                data = self.sock.recv(1 << 20)
                if not data:
                    return
                self.got += data
            reply = self.answer(i, n)
            if reply is None:
                return  # silent from here on
            self.sock.sendall(reply)


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    made = [socket.socketpair() for _ in range(3)]
    try:
        yield made
    finally:
        for a, b in made:
            a.close()
            b.close()


def _lanes(
    pairs: list[tuple[socket.socket, socket.socket]],
    sizes: list[int],
    wait: int = 1,
    streams: int = 1,
) -> tuple[list[redis_sender.RedisSender], list[Responder], envelope.PayloadPool]:
    pool = envelope.PayloadPool(300, pool_size=4, seed=9)
    senders, peers = [], []
    for a, b in pairs:
        s = _sender(wait=wait, streams=streams)
        s.wire = _PairWire(a)
        frame = len(s.heads[s.keys[0]]) + len(b"$300\r\n") + 300 + 2
        peer = Responder(b, frame, len(s.wait_command) if wait else 0, sizes)
        senders.append(s)
        peers.append(peer)
    return senders, peers, pool


def _expected(
    s: redis_sender.RedisSender,
    sender: int,
    first: int,
    sizes: list[int],
    records: Any,
    offset: int,
    pool: envelope.PayloadPool,
) -> bytes:
    """The bytes the generic path sends for these batches, each stamped with its start."""
    out, seq = b"", first
    for i, n in enumerate(sizes):
        head = s.heads[s.keys[i % len(s.keys)]]
        msgs = envelope.encode_batch(sender, seq, n, records[2 * i] + offset, pool)
        out += b"".join(head + b"$300\r\n" + m + b"\r\n" for m in msgs)
        out += s.wait_command if s.wait else b""
        seq += n
    return out


def test_lanes_send_each_senders_batches_and_record_when_each_went_and_came(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    sizes = [3, 1, 4, 2]
    senders, peers, pool = _lanes(pairs, sizes, wait=1, streams=2)
    for p in peers:
        p.thread.start()
    runs = array.array("q", sizes)
    records = [array.array("q", bytes(16 * len(sizes))) for _ in senders]
    lanes = [Lane(s, 10 + j, 100 * j, runs, records[j]) for j, s in enumerate(senders)]
    before = time.monotonic_ns()
    out = redis_sender.RedisSender.send_lanes(lanes, before + 10**10, 7_000, pool)
    after = time.monotonic_ns()
    assert out == [(4, None)] * 3
    for j, (s, p) in enumerate(zip(senders, peers, strict=True)):
        p.thread.join(5)
        rec = list(records[j])
        assert before <= rec[0] and all(a <= b for a, b in itertools.pairwise(rec))
        assert rec[-1] <= after
        assert bytes(p.got) == _expected(s, 10 + j, 100 * j, sizes, rec, 7_000, pool)
        assert s.next_key == 0  # 4 batches over 2 keys: round again


def test_a_failing_lane_stops_alone_and_says_why(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    sizes = [2, 2, 2]
    senders, peers, pool = _lanes(pairs, sizes, wait=1)
    wrongtype = b"-WRONGTYPE Operation against a key\r\n"
    peers[0].answer = lambda i, n: XADD_OK * n + b":1\r\n" if i == 0 else wrongtype * n + b":1\r\n"
    peers[1].answer = lambda i, n: XADD_OK * n + (b":0\r\n" if i == 1 else b":1\r\n")
    peers[2].answer = lambda i, n: XADD_OK * n + b":1\r\n"
    for p in peers:
        p.thread.start()
    records = [array.array("q", bytes(16 * len(sizes))) for _ in senders]
    lanes = [Lane(s, j, 0, array.array("q", sizes), records[j]) for j, s in enumerate(senders)]
    out = redis_sender.RedisSender.send_lanes(lanes, 2**62, 0, pool)
    (done0, e0), (done1, e1), (done2, e2) = out
    assert done0 == 1 and isinstance(e0, DriverError)
    assert str(e0) == "redis: send failed: WRONGTYPE Operation against a key"
    assert senders[0].wire.sock is None  # dropped: the next send connects again
    assert done1 == 1 and isinstance(e1, DriverError)
    assert str(e1) == "redis: WAIT 1: only 0 replicas acknowledged within 5000 ms"
    assert senders[1].wire.sock is not None  # a short WAIT keeps the connection
    assert (done2, e2) == (3, None)
    assert records[0][3] >= records[0][2] > 0  # the failed batch's start and end


def test_a_silent_lane_times_out_while_the_others_go_on(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    sizes = [1, 1, 1]
    senders, peers, pool = _lanes(pairs, sizes, wait=0)
    peers[0].answer = lambda i, n: None  # reads the first batch, never answers
    for s in senders:
        s.wire.timeout_s = 0.3
    for p in peers:
        p.thread.start()
    records = [array.array("q", bytes(16 * len(sizes))) for _ in senders]
    lanes = [Lane(s, j, 0, array.array("q", sizes), records[j]) for j, s in enumerate(senders)]
    t0 = time.monotonic()
    out = redis_sender.RedisSender.send_lanes(lanes, 2**62, 0, pool)
    assert 0.25 < time.monotonic() - t0 < 3
    assert out[0][0] == 0 and str(out[0][1]) == "redis: send failed: no reply within 0.3 s"
    assert out[1] == (3, None) and out[2] == (3, None)


def test_no_batch_starts_at_or_after_the_run_s_end(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    senders, peers, pool = _lanes(pairs[:1], [1], wait=0)
    peers[0].thread.start()
    records = array.array("q", bytes(32))
    lane = Lane(senders[0], 0, 0, array.array("q", [1, 1]), records)
    assert redis_sender.RedisSender.send_lanes([lane], time.monotonic_ns(), 0, pool) == [(0, None)]
    assert peers[0].got == b""


def test_lanes_refuse_sizes_and_records_that_do_not_fit(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    s = _sender(wait=0)
    spec = s._run_spec(1, envelope.PayloadPool(64, seed=1))
    fd = pairs[0][0].fileno()
    one = array.array("q", [1])
    with pytest.raises(ValueError, match="no room for 2 per batch"):
        _lanes_call(sendpath.REDIS, [(fd, spec, one, 0, 0, array.array("q", [0]))], 0, 0, 10**9)
    with pytest.raises(ValueError, match="out of range"):
        _lanes_call(
            sendpath.REDIS,
            [(fd, spec, array.array("q", [0]), 0, 0, array.array("q", [0, 0]))],
            0,
            0,
            10**9,
        )
    bad = (spec[0], spec[1], 7, *spec[3:])  # pads not 7 paddings alike
    with pytest.raises(ValueError, match="pool_n paddings"):
        _lanes_call(sendpath.REDIS, [(fd, bad, one, 0, 0, array.array("q", [0, 0]))], 0, 0, 10**9)


def _lanes_call(
    proto: int, items: list[tuple[Any, ...]], until: int, offset: int, timeout: int
) -> Any:
    """Every lane's run in a ``Lanes`` set until none is in flight: [(done, (status,
    integer, message))] per lane, (0, -1, None) for a run that ended without a failure."""
    ls = sendpath.Lanes(proto, len(items), timeout)
    for j, (fd, spec, sizes, seq, key, records) in enumerate(items):
        ls.assign(j, fd, spec, sizes, seq, key, records, 0, 0)
    while True:
        out = ls.run(2**62, until, offset, -1)
        going = [
            j
            for j, (done, in_flight, status) in enumerate(out)
            if status is None
            and (in_flight or (done < len(items[j][2]) and time.monotonic_ns() < until))
        ]
        if not going:
            return [(done, status or (0, -1, None)) for done, _, status in out]


# -- PostgreSQL (Lanes of PG) -----------------------------------------------------------------
def _pg_message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack(">I", len(body) + 4) + body


READY = _pg_message(b"Z", b"I")
DONE = _pg_message(b"2", b"") + _pg_message(b"C", b"INSERT 0 3\0") + READY


def _pg_parse(n: int) -> bytes:
    """Parse of the INSERT of n rows under its lane name: a connection's first batch of n."""
    rows = ", ".join(f"(${i})" for i in range(1, n + 1)).encode()
    body = b"mqlab_insert_%d\0" % n + b"INSERT INTO t VALUES " + rows + b"\0\0\0"
    return _pg_message(b"P", body)


def _pg_expected(sender: int, seq: int, n: int, stamp: int, pool: envelope.PayloadPool) -> bytes:
    """Bind (the INSERT prepared for n rows, binary parameters), Execute, Sync, written
    here from the protocol's description."""
    params = b"".join(
        struct.pack(">I", len(m)) + m for m in envelope.encode_batch(sender, seq, n, stamp, pool)
    )
    body = b"\0" + b"mqlab_insert_%d\0" % n + struct.pack(">hhh", 1, 1, n) + params + b"\0\0"
    return _pg_message(b"B", body) + _pg_message(b"E", b"\0\0\0\0\0") + _pg_message(b"S", b"")


def _pg_run(
    sock: socket.socket, peer: Peer, reply: bytes, sizes: list[int], chunk: int = 1 << 20
) -> tuple[tuple[int, tuple[int, int, str | None]], Any, envelope.PayloadPool]:
    pool = envelope.PayloadPool(100, pool_size=3, seed=4)
    spec = (b"mqlab_insert_", b"INSERT INTO t VALUES ", b"".join(pool._pads), 3, MAGIC, VERSION, 9)
    records = array.array("q", bytes(16 * len(sizes)))
    want = sum(len(_pg_expected(9, 0, n, 0, pool)) for n in sizes)
    want += sum(len(_pg_parse(n)) for n in set(sizes))
    peer.serve(want, reply, chunk)
    (out,) = _lanes_call(
        sendpath.PG,
        [(sock.fileno(), spec, array.array("q", sizes), 30, 0, records)],
        2**62,
        5,
        2 * 10**9,
    )
    return out, records, pool


def test_pg_lanes_write_the_extended_protocol_and_read_replies_split_anywhere(
    pair: tuple[socket.socket, Peer],
) -> None:
    sock, peer = pair
    notice = _pg_message(b"N", b"SWARNING\0Mcanceling wait\0\0")
    status = _pg_message(b"S", b"application_name\0mqlab\0")
    out, records, pool = _pg_run(sock, peer, notice + status + DONE, [3], chunk=1)
    assert out == (1, (0, -1, None))
    assert bytes(peer.got) == _pg_parse(3) + _pg_expected(9, 30, 3, records[0] + 5, pool)


def test_pg_lanes_report_the_server_s_error_after_ready_for_query(
    pair: tuple[socket.socket, Peer],
) -> None:
    sock, peer = pair
    error = _pg_message(b"E", b'SERROR\0VERROR\0C42P01\0Mrelation "t" does not exist\0P15\0\0')
    out, _, _ = _pg_run(sock, peer, error + READY, [2])
    assert out == (0, (1, -1, 'relation "t" does not exist (SQLSTATE 42P01)'))


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (_pg_message(b"D", b"\0\0") + READY, "an unexpected 'D' message"),
        (DONE + b"Z", "1 bytes after ReadyForQuery"),
        (b"C\0\0\0\2", "a malformed 'C' message"),
        (_pg_message(b"N", b"x" * 20_000), "a 'N' message longer than 16384 bytes"),
    ],
)
def test_pg_replies_out_of_step_are_a_protocol_failure(
    pair: tuple[socket.socket, Peer], reply: bytes, why: str
) -> None:
    sock, peer = pair
    (done, (status, _, message)), _, _ = _pg_run(sock, peer, reply, [1])
    assert (done, status) == (0, 4) and message is not None and why in message


def test_pg_lanes_time_out_a_silent_server_and_see_a_closed_one(
    pair: tuple[socket.socket, Peer],
) -> None:
    sock, peer = pair
    pool = envelope.PayloadPool(100, pool_size=3, seed=4)
    spec = (b"mqlab_insert_", b"INSERT INTO t VALUES ", b"".join(pool._pads), 3, MAGIC, VERSION, 9)
    records = array.array("q", bytes(16))
    peer.serve(1, b"")  # reads, never answers
    t0 = time.monotonic()
    lane = (sock.fileno(), spec, array.array("q", [1]), 0, 0, records)
    assert _lanes_call(sendpath.PG, [lane], 2**62, 0, 300_000_000) == [(0, (2, -1, None))]
    assert 0.25 < time.monotonic() - t0 < 3
    peer.sock.shutdown(socket.SHUT_WR)
    out = _lanes_call(sendpath.PG, [lane], 2**62, 0, 2 * 10**9)
    assert out == [(0, (3, -1, "connection closed by the server"))]


def _pg_window(
    sock: socket.socket, peer: Peer, replies: list[bytes], sizes: list[int]
) -> tuple[list[tuple[int, int, Any]], Any, envelope.PayloadPool]:
    """A fixed-rate PG lane whose batches' slots all passed (0): every batch goes at once,
    in flight together, the peer answering once it has them all (``replies`` joined, a
    byte at a time); each run()'s result until the lane is idle or failed."""
    pool = envelope.PayloadPool(100, pool_size=3, seed=4)
    spec = (b"mqlab_insert_", b"INSERT INTO t VALUES ", b"".join(pool._pads), 3, MAGIC, VERSION, 9)
    records = array.array("q", bytes(16 * len(sizes)))
    want = sum(len(_pg_expected(9, 0, n, 0, pool)) for n in sizes)
    want += sum(len(_pg_parse(n)) for n in set(sizes))
    answering = peer.serve(want, b"".join(replies), 1)
    ls = sendpath.Lanes(sendpath.PG, 1, 2 * 10**9)
    slots = array.array("q", [0] * len(sizes))
    ls.assign(0, sock.fileno(), spec, array.array("q", sizes), 30, 0, records, 0, 0, slots)
    seen = []
    while True:
        [out] = ls.run(time.monotonic_ns() + 10**9, 2**62, 5, -1)
        seen.append(out)
        done, in_flight, status = out
        if status is not None or (done == len(sizes) and not in_flight):
            answering.join(10)  # all its replies written (unread ones too) before the close
            assert not answering.is_alive()
            return seen, records, pool


def test_a_fixed_rate_pg_lane_pipelines_its_batches_and_prepares_each_size_once(
    pair: tuple[socket.socket, Peer],
) -> None:
    """Three batches due at once go together (the lane's window), the INSERT of 2 rows
    prepared by the first only; their replies, read a byte at a time, confirm them in
    order, each stamped with its slot (0 + the wall offset)."""
    sock, peer = pair
    seen, records, pool = _pg_window(sock, peer, [DONE, DONE, DONE], [2, 2, 3])
    assert seen[-1] == (3, 0, None)
    assert bytes(peer.got) == (
        _pg_parse(2)
        + _pg_expected(9, 30, 2, 5, pool)
        + _pg_expected(9, 32, 2, 5, pool)
        + _pg_parse(3)
        + _pg_expected(9, 34, 3, 5, pool)
    )
    starts, ends = records[0::2], records[1::2]
    assert starts[2] < ends[0] <= ends[1] <= ends[2]  # all three went before any came back


def test_a_failed_batch_in_a_pg_window_fails_those_in_flight_behind_it(
    pair: tuple[socket.socket, Peer],
) -> None:
    """The second of three batches in flight is refused: the first is confirmed, the
    second fails with the server's error, and the third (in flight behind it, its reply
    not read) is reported with it: in_flight 1, its record ended when the lane failed."""
    sock, peer = pair
    error = _pg_message(b"E", b"SERROR\0VERROR\0C23505\0Mduplicate key\0\0")
    seen, records, _ = _pg_window(sock, peer, [DONE, error + READY, DONE], [1, 1, 1])
    assert seen[-1] == (1, 1, (1, -1, "duplicate key (SQLSTATE 23505)"))
    assert records[3] == records[5] > records[4] > 0  # ended together, the third started


def test_a_lane_on_a_closed_descriptor_fails_at_once(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    s = _sender(wait=0)
    spec = s._run_spec(1, envelope.PayloadPool(64, seed=1))
    a, _ = pairs[0]
    fd = os.dup(a.fileno())
    os.close(fd)  # nothing else opens a descriptor during the call
    lane = (fd, spec, array.array("q", [1]), 0, 0, array.array("q", [0, 0]))
    t0 = time.monotonic()
    ((done, (status, _, message)),) = _lanes_call(sendpath.REDIS, [lane], 2**62, 0, 5 * 10**9)
    assert (done, status, message) == (0, 3, os.strerror(errno.EBADF))
    assert time.monotonic() - t0 < 1
