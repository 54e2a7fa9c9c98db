"""The compiled send path (mqlab/_sendpath.c) on a socket pair: what it writes, and how
it reads every kind of reply (split, errors, nil, large, unexpected), closes and
timeouts. The real server's side is in tests/integration/drivers/test_redis.py."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import hiredis
import pytest
import redis

from mqlab.drivers import redis as redis_driver
from mqlab.drivers.base import Endpoints, NodeEndpoint
from mqlab.errors import DriverError
from mqlab.workload import envelope

sendpath: Any = redis_driver._sendpath  # None when the install did not build it
MAGIC, VERSION = envelope.MAGIC, envelope.VERSION


def test_the_compiled_send_path_is_built_here() -> None:
    """The project's install builds it (setup.py); a missing compiler would show here."""
    assert sendpath is not None and redis_driver.SEND_PATH == "compiled"


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
    return redis_driver.SPEC.pack(f.prefix_len, f.frame, MAGIC, VERSION, sender, extra) + trailer


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
class _PairWire(redis_driver._SendWire):
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


def _sender(wait: int, streams: int = 1) -> redis_driver.RedisSender:
    settings = redis_driver.Settings(streams=streams, wait_replicas=wait)
    endpoints = Endpoints("redis", (NodeEndpoint(0, "127.0.0.1", 1),))
    s = redis_driver.RedisSender(redis_driver.RedisDriver(settings, endpoints, "q"))
    s.next_key = 0
    return s


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_the_sender_writes_the_same_bytes_on_either_path(
    pair: tuple[socket.socket, Peer], monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    if not compiled:
        monkeypatch.setattr(redis_driver, "_sendpath", None)
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
        monkeypatch.setattr(redis_driver, "_sendpath", None)
    sock, peer = pair
    s = _sender(wait=1)
    s.wire = _PairWire(sock)
    peer.serve(1, reply)
    with pytest.raises(DriverError, match=match):
        s.send_stamped(1, 0, 2, 0, envelope.PayloadPool(64, seed=1))
