"""The compiled NATS lanes (mqlab/_sendpath.c, PROTO_NATS) against a fake server on a
socket pair: the PUBs a batch writes, and how the replies are read: PubAcks out of order
and split anywhere, a server PING mid-stream, INFO and +OK, an error PubAck, a late
reply of an earlier batch, no responders (published again, or given up), -ERR, a
silent server. The real cluster's side: tests/brokers/test_contract.py -k nats."""

from __future__ import annotations

import array
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mqlab import envelope
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.nats import driver as nats_driver
from mqlab.brokers.nats.lane import LaneConn
from mqlab.errors import DriverError

sendpath: Any = nats_driver._sendpath
pytestmark = pytest.mark.skipif(
    sendpath is None, reason="tests/brokers/test_sendpath.py fails first"
)
INBOX = b"_INBOX.test"
SUBJECT = b"q_1.q"
SENDER = 7
WAIT_NS = 50_000_000  # before publishing again what no server took
POOL = envelope.PayloadPool(40, pool_size=3, seed=1)
PUB = re.compile(rb"PUB (\S+) (\S+) (\d+)\r\n")


class Server:
    """The other end of the lane's connection: reads its PUBs, writes replies."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.sock.settimeout(5)
        self.buf = b""
        self.pongs = 0

    def pubs(self, n: int) -> list[tuple[bytes, bytes, bytes]]:
        """The next ``n`` PUBs: (subject, reply subject, payload) each (PONGs counted)."""
        out: list[tuple[bytes, bytes, bytes]] = []
        while len(out) < n:
            if not self._parse(out):
                self.buf += self.sock.recv(65536)
        return out

    def _parse(self, out: list[tuple[bytes, bytes, bytes]]) -> bool:
        """A PONG or a PUB from the buffer, if whole (a PUB into ``out``)."""
        if self.buf.startswith(b"PONG\r\n"):
            self.pongs += 1
            self.buf = self.buf[6:]
            return True
        m = PUB.match(self.buf)
        if not m or len(self.buf) < m.end() + int(m[3]) + 2:
            return False
        size = int(m[3])
        payload = self.buf[m.end() : m.end() + size]
        assert self.buf[m.end() + size : m.end() + size + 2] == b"\r\n"
        out.append((m[1], m[2], payload))
        self.buf = self.buf[m.end() + size + 2 :]
        return True

    def read_pongs(self, n: int) -> None:
        while self.pongs < n:
            if not self._parse([]):
                self.buf += self.sock.recv(65536)

    def write(self, data: bytes, chunk: int = 1 << 20) -> None:
        for i in range(0, len(data), chunk):
            self.sock.sendall(data[i : i + chunk])


def ack(reply: bytes, seq: int) -> bytes:
    body = b'{"stream":"q_1","seq":%d}' % seq
    return b"MSG %s 1 %d\r\n%s\r\n" % (reply, len(body), body)


def no_responders(reply: bytes) -> bytes:
    head = b"NATS/1.0 503\r\n\r\n"
    return b"HMSG %s 1 %d %d\r\n%s\r\n" % (reply, len(head), len(head), head)


class Lane:
    """One NATS lane on a socket pair, its batches run on a thread of their own."""

    def __init__(self, sock: socket.socket, timeout_s: float = 5.0):
        self.sock = sock
        self.ls = sendpath.Lanes(sendpath.NATS, 1, int(timeout_s * 1e9))
        self.spec = (
            SUBJECT,
            INBOX,
            b"".join(POOL._pads),
            len(POOL._pads),
            envelope.MAGIC,
            envelope.VERSION,
            SENDER,
            WAIT_NS,
        )
        self.records = array.array("q")

    def start(self, sizes: list[int], seq: int = 0) -> threading.Thread:
        """Assign the run and drive it on a thread until it ended; ``self.result``."""
        self.sizes = array.array("q", sizes)
        self.records = array.array("q", bytes(16 * len(sizes)))
        self.ls.assign(0, self.sock.fileno(), self.spec, self.sizes, seq, 0, self.records, 0, 1)
        self.result: Any = None

        def go() -> None:
            self.result = self.ls.run(time.monotonic_ns() + 30 * 10**9, 2**62, 0, -1)[0]

        t = threading.Thread(target=go, daemon=True)
        t.start()
        return t

    def end(self, t: threading.Thread) -> Any:
        t.join(20)
        assert not t.is_alive()
        self.ls.release(0)
        return self.result


@pytest.fixture
def pair() -> Iterator[tuple[Lane, Server]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        yield Lane(a), Server(b)
    finally:
        a.close()
        b.close()


def test_a_batch_is_its_pubs_confirmed_by_acks_out_of_order_split_anywhere(
    pair: tuple[Lane, Server],
) -> None:
    lane, server = pair
    t = lane.start([5], seq=100)
    pubs = server.pubs(5)
    assert [p[0] for p in pubs] == [SUBJECT] * 5
    assert len({p[1] for p in pubs}) == 5 and all(p[1].startswith(INBOX + b".") for p in pubs)
    stamp = lane.records[0]
    assert [p[2] for p in pubs] == envelope.encode_batch(SENDER, 100, 5, stamp, POOL)
    replies = b"INFO {}\r\n+OK\r\n" + b"".join(
        ack(p[1], i) for i, p in reversed(list(enumerate(pubs)))
    )
    server.write(replies, chunk=1)
    assert lane.end(t) == (1, 0, None)
    assert lane.records[1] >= lane.records[0] > 0


def test_a_server_ping_mid_stream_is_answered_and_the_batch_goes_on(
    pair: tuple[Lane, Server],
) -> None:
    lane, server = pair
    t = lane.start([3, 2])
    pubs = server.pubs(3)
    server.write(ack(pubs[0][1], 1) + b"PING\r\n" + ack(pubs[1][1], 2), chunk=7)
    server.read_pongs(1)  # answered while the batch still waits for a reply
    server.write(ack(pubs[2][1], 3))
    second = server.pubs(2)  # the next batch: new reply subjects
    assert not {p[1] for p in second} & {p[1] for p in pubs}
    server.write(b"".join(ack(p[1], 4 + i) for i, p in enumerate(second)))
    assert lane.end(t) == (2, 0, None)


def test_an_error_ack_fails_the_batch_and_its_late_replies_do_not_count_for_the_next(
    pair: tuple[Lane, Server],
) -> None:
    lane, server = pair
    t = lane.start([3])
    pubs = server.pubs(3)
    err = b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}'
    server.write(ack(pubs[0][1], 1) + b"MSG %s 1 %d\r\n%s\r\n" % (pubs[1][1], len(err), err))
    done, in_flight, outcome = lane.end(t)
    assert (done, in_flight) == (0, 0)
    assert outcome[0] == nats_driver.ST_REPLY_ERROR and "maximum messages exceeded" in outcome[2]
    # the same connection goes on: the failed batch's last reply comes late, then the
    # next batch's replies; only all of the next batch's confirm it
    t = lane.start([2], seq=3)
    pubs2 = server.pubs(2)
    server.write(ack(pubs[2][1], 3) + ack(pubs2[0][1], 4))
    time.sleep(0.2)
    assert t.is_alive()  # one reply of its two: still waiting
    server.write(ack(pubs2[1][1], 5))
    assert lane.end(t) == (1, 0, None)


def test_what_no_server_took_is_published_again_after_the_wait(
    pair: tuple[Lane, Server],
) -> None:
    lane, server = pair
    t = lane.start([3])
    pubs = server.pubs(3)
    server.write(no_responders(pubs[1][1]) + ack(pubs[0][1], 1) + no_responders(pubs[2][1]))
    again = server.pubs(2)
    assert again == pubs[1:]  # the same messages, the same reply subjects
    server.write(ack(again[0][1], 2))
    server.write(no_responders(again[1][1]))
    last = server.pubs(1)
    assert last == pubs[2:]
    server.write(ack(last[0][1], 3))
    assert lane.end(t) == (1, 0, None)


def test_no_responders_until_the_timeout_fails_the_batch_saying_how_many() -> None:
    a, b = socket.socketpair()
    a.setblocking(False)
    lane, server = Lane(a, timeout_s=0.3), Server(b)
    server.sock.settimeout(1)
    try:
        t = lane.start([2])
        pubs = server.pubs(2)
        while t.is_alive():
            server.write(b"".join(no_responders(p[1]) for p in pubs))
            try:
                pubs = server.pubs(2)
            except TimeoutError:
                break
        done, _, outcome = lane.end(t)
        assert done == 0 and outcome[:2] == (nats_driver.ST_NO_RESPONDERS, 2)
        sender = object.__new__(nats_driver.NatsSender)
        sender.subject, sender.timeout = "q_1.q", 0.3
        err = sender.lane_outcome(*outcome)
        assert err is not None and "no JetStream server took 2 messages" in str(err)
    finally:
        a.close()
        b.close()


def test_err_fails_the_lane_and_a_silent_server_times_out() -> None:
    for reply, status in ((b"-ERR 'Authorization Violation'\r\n", 3), (b"", 2)):
        a, b = socket.socketpair()
        a.setblocking(False)
        lane, server = Lane(a, timeout_s=0.3), Server(b)
        try:
            t = lane.start([2])
            server.pubs(2)
            server.write(reply)
            done, _, outcome = lane.end(t)
            assert done == 0 and outcome[0] == status
            if status == 3:
                assert "Authorization Violation" in outcome[2]
        finally:
            a.close()
            b.close()


def test_a_reply_out_of_step_is_a_protocol_failure(pair: tuple[Lane, Server]) -> None:
    lane, server = pair
    t = lane.start([1])
    server.pubs(1)
    server.write(b"MSG a 1 notanumber\r\n")
    done, _, outcome = lane.end(t)
    assert done == 0 and outcome[0] == 4 and "malformed" in outcome[2]


class FakeNode:
    """A loopback listener that plays a NATS server's side of the handshake: INFO, then
    what ``answer`` says once it read the CONNECT, SUB and PING."""

    def __init__(self, answer: bytes):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.got = b""
        self.answer = answer
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        self.conn = conn
        conn.sendall(b'INFO {"server_id":"x","max_payload":1048576}\r\n')
        while b"PING\r\n" not in self.got:
            self.got += conn.recv(65536)
        for part in self.answer.split(b"|"):
            conn.sendall(part)
            time.sleep(0.02)

    def close(self) -> None:
        self.listener.close()
        if hasattr(self, "conn"):
            self.conn.close()


def _endpoints(*ports: int) -> Endpoints:
    nodes = tuple(NodeEndpoint(i, "127.0.0.1", p) for i, p in enumerate(ports))
    return Endpoints("nats", nodes)


def test_the_lane_connects_to_the_next_node_and_hands_over_at_a_line_s_start() -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    dead = closed.getsockname()[1]
    closed.close()  # nothing listens there: refused
    node = FakeNode(b"+OK\r\nPO|NG\r\nPING\r\nIN|FO {}\r\n")  # a PING and an INFO after PONG
    try:
        conn = LaneConn(_endpoints(dead, node.port), 2.0, "t")
        conn.next_node = 0
        conn.connect()
        assert conn.sock is not None and conn.generation == 1
        assert conn.sock.getblocking() is False
        node.thread.join(5)
        assert b'"verbose":false' in node.got and b'"headers":true' in node.got
        assert b"SUB %s.> 1\r\n" % conn.inbox in node.got
        node.conn.settimeout(2)
        assert node.conn.recv(100) == b"PONG\r\n"  # the server's PING, answered
        conn.close()
    finally:
        node.close()


def test_a_handshake_the_server_refuses_names_every_node() -> None:
    node = FakeNode(b"-ERR 'Authorization Violation'\r\n")
    try:
        conn = LaneConn(_endpoints(node.port), 2.0, "t")
        with pytest.raises(
            DriverError, match=r"cannot connect a sender: 127\.0\.0\.1:\d+: .*Authorization"
        ):
            conn.connect()
        assert conn.sock is None
    finally:
        node.close()
