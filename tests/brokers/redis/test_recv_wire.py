"""mqlab/_recvpath.c's redis_receive against a fake Redis server on a socket pair: the
commands of each round (the last read's XACK and XDEL, then XREADGROUP, BLOCKing after
an empty read), and what it makes of the replies, RESP2 and RESP3, split anywhere
(headers, short entries, counts, errors, replies out of step)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

import hiredis
import pytest

from mqlab import envelope
from mqlab.brokers import compiled

pytestmark = pytest.mark.skipif(
    compiled.recv_module is None, reason="not built: tests/brokers/test_sendpath.py fails"
)
KEY, GROUP, NAME = b"q", b"workers", b"c-1"
SPEC = (GROUP, (KEY,), b"m", 256, True, 50_000_000, 30_000_000_000, envelope.HEADER_BYTES)


def _bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def _entries(entries: list[tuple[bytes, bytes]]) -> bytes:
    out = b"*%d\r\n" % len(entries)
    for entry_id, value in entries:
        out += b"*2\r\n" + _bulk(entry_id) + b"*2\r\n" + _bulk(b"m") + _bulk(value)
    return out


def read_reply(entries: list[tuple[bytes, bytes]], resp3: bool) -> bytes:
    if resp3:
        return b"%1\r\n" + _bulk(KEY) + _entries(entries)
    return b"*1\r\n*2\r\n" + _bulk(KEY) + _entries(entries)


def nil(resp3: bool) -> bytes:
    return b"_\r\n" if resp3 else b"*-1\r\n"


class Server:
    """Reads the client's commands (hiredis parses them, as RESP arrays) and answers each
    round with the given replies, a byte at a time."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.reader = hiredis.Reader()
        self.commands: list[list[bytes]] = []

    def round(self, want: int) -> list[list[bytes]]:
        """The next ``want`` commands."""
        got: list[list[bytes]] = []
        while len(got) < want:
            cmd = self.reader.gets()
            if cmd is False:
                data = self.sock.recv(65536)
                assert data, "the client closed"
                self.reader.feed(data)
                continue
            got.append(cmd)
        self.commands += got
        return got

    def answer(self, data: bytes) -> None:
        for i in range(len(data)):
            self.sock.sendall(data[i : i + 1])


def _serve(script: Callable[[Server, Callable[[], object]], None]) -> tuple:
    """redis_receive on one end of a socket pair, ``script`` playing the server on the
    other (it ends the call through the ``wake`` it is handed)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    rfd, wfd = os.pipe()
    failures: list[BaseException] = []
    server = Server(theirs)

    def run() -> None:
        try:
            script(server, lambda: os.write(wfd, b"x"))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failures.append(e)
            os.write(wfd, b"x")

    t = threading.Thread(target=run)
    t.start()
    try:
        assert compiled.recv_module is not None
        [out] = compiled.recv_module.redis_receive(
            [(ours.fileno(), NAME)], SPEC, time.monotonic_ns() + 60_000_000_000, 1000, rfd
        )
        t.join(30)
    finally:
        ours.close()
        theirs.close()
        os.close(rfd)
        os.close(wfd)
    assert not failures, failures
    return out


def _message(seq: int) -> bytes:
    return envelope.encode(7, seq, 5, b"p" * 30)


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_rounds_ack_the_last_read_with_the_next_and_block_after_an_empty_one(
    resp3: bool,
) -> None:
    """Round 1: a read of 256 gets two entries and one too short for a header; round 2
    acks and deletes those 3 and reads again (no BLOCK), gets nothing; round 3 reads with
    BLOCK and the call is ended meanwhile: its reply is awaited, nothing left to ack."""

    def script(server: Server, wake: Callable[[], object]) -> None:
        [read] = server.round(1)
        assert read == [
            b"XREADGROUP",
            b"GROUP",
            GROUP,
            NAME,
            b"COUNT",
            b"256",
            b"STREAMS",
            KEY,
            b">",
        ]
        three = [(b"1-1", _message(4)), (b"1-2", b"tiny"), (b"2-0", _message(5))]
        server.answer(read_reply(three, resp3))
        xack, xdel, read = server.round(3)
        assert xack == [b"XACK", KEY, GROUP, b"1-1", b"1-2", b"2-0"]
        assert xdel == [b"XDEL", KEY, b"1-1", b"1-2", b"2-0"]
        assert read[:6] == [b"XREADGROUP", b"GROUP", GROUP, NAME, b"COUNT", b"256"]
        assert b"BLOCK" not in read
        server.answer(b":3\r\n:3\r\n" + nil(resp3))
        [read] = server.round(1)
        assert read[6:8] == [b"BLOCK", b"50"]
        wake()
        server.answer(nil(resp3))

    headers, recv_ns, lens, flagged, received, short, acked, status, message = _serve(script)
    assert (status, message) == (0, None)
    assert (received, short, acked) == (3, 1, 3)
    assert [envelope.HEADER.unpack_from(headers, i)[3] for i in (0, 24)] == [4, 5]
    assert len(headers) == 2 * envelope.HEADER_BYTES and flagged == b""
    assert list(memoryview(lens).cast("q")) == [2]
    assert len(memoryview(recv_ns).cast("q")) == 1


def test_at_the_end_the_entries_read_are_acked_alone() -> None:
    """The call is ended while a read's reply is due: once it comes, its entries are
    acked (XACK and XDEL, no read) and the call returns with them acked."""

    def script(server: Server, wake: Callable[[], object]) -> None:
        server.round(1)
        wake()
        server.answer(read_reply([(b"5-0", _message(1)), (b"5-1", _message(2))], False))
        xack, xdel = server.round(2)
        assert xack == [b"XACK", KEY, GROUP, b"5-0", b"5-1"] and xdel[0] == b"XDEL"
        server.answer(b":2\r\n:2\r\n")

    out = _serve(script)
    assert out[4:] == (2, 0, 2, 0, None)


@pytest.mark.parametrize(
    ("reply", "status", "why"),
    [
        (b"-NOGROUP No such key 'q' or consumer group\r\n", 1, "NOGROUP No such key"),
        (b"+OK\r\n", 4, "a malformed reply: +OK"),
        (b"*1\r\n*2\r\n$1\r\nx\r\n*0\r\n", 4, "an unexpected element"),
        (b"*1\r\n*2\r\n" + _bulk(KEY) + b"*1\r\n*2\r\n" + _bulk(b"1-1") + b"*0\r\n", 4, "without"),
        (nil(False) + b":1\r\n", 4, "bytes after the replies"),
    ],
    ids=["error", "simple-string", "unknown-key", "no-field", "extra-bytes"],
)
def test_an_error_or_a_reply_out_of_step_fails_the_connection(
    reply: bytes, status: int, why: str
) -> None:
    def script(server: Server, wake: Callable[[], object]) -> None:
        server.round(1)
        server.sock.sendall(reply)  # whole: the bytes after a reply come with it

    out = _serve(script)
    assert out[7] == status and why in out[8], out
    assert out[4] == 0  # nothing counted received of a reply out of step
