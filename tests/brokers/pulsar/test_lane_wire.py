"""The compiled Pulsar lanes (mqlab/_sendpath.c with mqlab/_pulsarwire.h, PROTO_PULSAR)
against a fake broker on a socket pair: the SEND frames a batch writes (decoded here with
a protobuf reader and a CRC-32C of this file's own), and how receipts are read: split
anywhere, a PING mid-stream, sequence ids going on across batches and starting again on a
new connection, a SEND_ERROR, CLOSE_PRODUCER, a receipt out of order, an unknown command,
a silent broker. Then the handshake (mqlab/brokers/pulsar/lane.py) against fake brokers:
CONNECT, a LOOKUP redirected to another broker, PRODUCER. The real cluster's side:
tests/brokers/test_contract.py -k pulsar and the Pulsar runs."""

from __future__ import annotations

import array
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mqlab import envelope
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.pulsar import driver as pulsar_driver
from mqlab.brokers.pulsar.lane import LaneConn
from mqlab.errors import DriverError

sendpath: Any = pulsar_driver._sendpath
pytestmark = pytest.mark.skipif(
    sendpath is None, reason="tests/brokers/test_sendpath.py fails first"
)
NAME = b"standalone-0-7"
PRODUCER = 1
SENDER = 9
POOL = envelope.PayloadPool(60, pool_size=3, seed=2)
TOPIC = "persistent://public/default/q"


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def decode(buf: bytes) -> dict[int, Any]:
    """A protobuf message: field -> its last value (int, or bytes)."""
    out: dict[int, Any] = {}
    at = 0
    while at < len(buf):
        key, at = read_varint(buf, at)
        if key & 7 == 0:
            out[key >> 3], at = read_varint(buf, at)
        else:
            assert key & 7 == 2
            size, at = read_varint(buf, at)
            out[key >> 3], at = buf[at : at + size], at + size
    return out


def read_varint(buf: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, at


def frame(kind: int, body: bytes) -> bytes:
    cmd = b"\x08" + varint(kind) + varint(kind << 3 | 2) + varint(len(body)) + body
    return struct.pack(">II", len(cmd) + 4, len(cmd)) + cmd


def receipt(seq: int, producer: int = PRODUCER) -> bytes:
    message_id = b"\x08\x05\x10" + varint(seq)
    return frame(7, b"\x08" + varint(producer) + b"\x10" + varint(seq) + b"\x1a\x04" + message_id)


def send_error(seq: int, text: bytes) -> bytes:
    body = b"\x08\x01\x10" + varint(seq) + b"\x18\x02\x22" + varint(len(text)) + text
    return frame(8, body)


class Broker:
    """The other end of the lane's connection: reads its frames, writes answers."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.sock.settimeout(5)
        self.buf = b""
        self.pongs = 0

    def _frame(self) -> tuple[int, dict[int, Any], bytes] | None:
        if len(self.buf) < 4:
            return None
        (total,) = struct.unpack(">I", self.buf[:4])
        if len(self.buf) < 4 + total:
            return None
        body, self.buf = self.buf[4 : 4 + total], self.buf[4 + total :]
        (size,) = struct.unpack(">I", body[:4])
        base = decode(body[4 : 4 + size])
        return base[1], decode(base.get(base[1], b"")), body[4 + size :]

    def sends(self, n: int) -> list[tuple[dict[int, Any], dict[int, Any], bytes]]:
        """The next ``n`` SENDs: (CommandSend, MessageMetadata, message) each, every
        checksum checked (PONGs counted)."""
        out = []
        while len(out) < n:
            got = self._frame()
            if got is None:
                self.buf += self.sock.recv(65536)
                continue
            kind, cmd, rest = got
            if kind == 19:
                self.pongs += 1
                continue
            assert kind == 6
            assert rest[:2] == b"\x0e\x01"
            (crc,) = struct.unpack(">I", rest[2:6])
            assert crc == crc32c(rest[6:])
            (meta_size,) = struct.unpack(">I", rest[6:10])
            out.append((cmd, decode(rest[10 : 10 + meta_size]), rest[10 + meta_size :]))
        return out

    def read_pongs(self, n: int) -> None:
        while self.pongs < n:
            got = self._frame()
            if got is None:
                self.buf += self.sock.recv(65536)
            elif got[0] == 19:
                self.pongs += 1

    def write(self, data: bytes, chunk: int = 1 << 20) -> None:
        for i in range(0, len(data), chunk):
            self.sock.sendall(data[i : i + chunk])
            if chunk < 100:
                time.sleep(0.001)


class Lane:
    """One Pulsar lane on a socket pair, its batches run on a thread of their own."""

    def __init__(self, sock: socket.socket, timeout_s: float = 5.0):
        self.sock = sock
        self.ls = sendpath.Lanes(sendpath.PULSAR, 1, int(timeout_s * 1e9))
        self.spec = (
            NAME,
            PRODUCER,
            b"".join(POOL._pads),
            len(POOL._pads),
            envelope.MAGIC,
            envelope.VERSION,
            SENDER,
        )

    def start(self, sizes: list[int], seq: int = 0, conn_gen: int = 1) -> threading.Thread:
        self.sizes = array.array("q", sizes)
        self.records = array.array("q", bytes(16 * len(sizes)))
        self.ls.assign(
            0, self.sock.fileno(), self.spec, self.sizes, seq, 0, self.records, 0, conn_gen
        )
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
def pair() -> Iterator[tuple[Lane, Broker]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        yield Lane(a), Broker(b)
    finally:
        a.close()
        b.close()


def test_the_crc_of_this_file_is_crc32c() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C


def test_a_batch_is_a_send_per_message_confirmed_by_receipts_split_anywhere(
    pair: tuple[Lane, Broker],
) -> None:
    lane, broker = pair
    t = lane.start([4, 3], seq=100)
    first = broker.sends(4)
    for k, (cmd, meta, message) in enumerate(first):
        assert cmd == {1: PRODUCER, 2: k}
        assert meta[1] == NAME and meta[2] == k and meta[9] == len(message)
        magic, version, sender, seq, stamp = struct.unpack("<HHIQq", message[:24])
        assert (magic, version, sender, seq) == (envelope.MAGIC, envelope.VERSION, SENDER, 100 + k)
        assert meta[3] == stamp // 1_000_000  # publish time: the header's stamp, in ms
        assert message[24:] == POOL._pads[100 % len(POOL._pads)]
        assert len(message) == 60
    broker.write(b"".join(receipt(k) for k in range(4)), chunk=3)
    second = broker.sends(3)  # the next batch goes once all 4 came; sequence ids go on
    assert [c[2] for c, _, _ in second] == [4, 5, 6]
    assert [struct.unpack("<Q", m[8:16])[0] for _, _, m in second] == [104, 105, 106]
    broker.write(b"".join(receipt(k) for k in (4, 5, 6)))
    assert lane.end(t) == (2, 0, None)
    assert lane.records[1] >= lane.records[0] > 0 and lane.records[3] >= lane.records[2]


def test_sequence_ids_go_on_across_runs_and_start_again_on_a_new_connection(
    pair: tuple[Lane, Broker],
) -> None:
    lane, broker = pair
    t = lane.start([2])
    broker.sends(2)
    broker.write(receipt(0) + receipt(1))
    assert lane.end(t) == (1, 0, None)
    t = lane.start([2], seq=2)
    assert [c[2] for c, _, _ in broker.sends(2)] == [2, 3]
    broker.write(receipt(2) + receipt(3))
    assert lane.end(t) == (1, 0, None)
    t = lane.start([1], seq=4, conn_gen=2)  # a new connection: a new producer
    assert [c[2] for c, _, _ in broker.sends(1)] == [0]
    broker.write(receipt(0))
    assert lane.end(t) == (1, 0, None)


def test_a_ping_mid_stream_is_answered_and_the_batch_goes_on(pair: tuple[Lane, Broker]) -> None:
    lane, broker = pair
    t = lane.start([3])
    broker.sends(3)
    broker.write(receipt(0) + frame(18, b"") + frame(19, b"") + receipt(1))
    broker.read_pongs(1)  # answered while the batch waits for its last receipt
    broker.write(receipt(2))
    assert lane.end(t) == (1, 0, None)


@pytest.mark.parametrize(
    ("answer", "status", "says"),
    [
        (receipt(0) + send_error(1, b"PersistenceError: bookies down"), 1, "bookies down"),
        (receipt(0) + frame(15, b"\x08\x01\x10\x02"), 3, "closed the producer"),
        (receipt(1), 4, "sequence id 1, where 0 was due"),
        (receipt(0, producer=2), 4, "producer 2"),
        (frame(13, b"\x08\x01"), 4, "unexpected command (type 13)"),
        (b"\x00\x00\x00\x03\x00\x00\x00", 4, "malformed"),
    ],
)
def test_what_fails_a_batch(
    pair: tuple[Lane, Broker], answer: bytes, status: int, says: str
) -> None:
    lane, broker = pair
    t = lane.start([2])
    broker.sends(2)
    broker.write(answer)
    done, _, outcome = lane.end(t)
    assert done == 0 and outcome[0] == status and says in outcome[2]


def test_a_silent_broker_times_out_and_the_sender_drops_the_connection() -> None:
    a, b = socket.socketpair()
    a.setblocking(False)
    lane, broker = Lane(a, timeout_s=0.3), Broker(b)
    try:
        t = lane.start([2])
        broker.sends(2)
        done, _, outcome = lane.end(t)
        assert done == 0 and outcome[0] == 2
    finally:
        a.close()
        b.close()


class FakeBroker:
    """A loopback listener playing a broker's side of the handshake: CONNECTED, then
    each LOOKUP answered by ``lookup`` (a function of the request's fields), each
    PRODUCER by ``producer``; a PING goes before the CONNECTED."""

    def __init__(self, lookup: Any = None, producer: bytes = b""):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"pulsar://127.0.0.1:{self.port}".encode()
        self.lookup = lookup
        self.producer = producer
        self.got: list[tuple[int, dict[int, Any]]] = []
        self.pong = False
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            broker = Broker(conn)
            try:
                while True:
                    while (got := broker._frame()) is None:
                        data = conn.recv(65536)
                        if not data:
                            raise OSError
                        broker.buf += data
                    kind, cmd, _ = got
                    self.got.append((kind, cmd))
                    if kind == 2:
                        conn.sendall(frame(18, b"") + frame(3, b"\x0a\x034.2"))
                    elif kind == 19:
                        self.pong = True
                    elif kind == 23:
                        conn.sendall(frame(24, self.lookup(cmd)))
                    elif kind == 5:
                        conn.sendall(self.producer)
            except OSError:
                continue

    def close(self) -> None:
        self.listener.close()
        for c in self.conns:
            c.close()


def _endpoints(*ports: int) -> Endpoints:
    nodes = tuple(NodeEndpoint(i, "127.0.0.1", p) for i, p in enumerate(ports))
    return Endpoints("pulsar", nodes)


def lookup_answer(url: bytes, response: int, authoritative: int, request: int) -> bytes:
    return (
        b"\x0a"
        + varint(len(url))
        + url
        + b"\x18"
        + varint(response)
        + b"\x20"
        + varint(request)
        + b"\x28"
        + varint(authoritative)
    )


def test_a_lookup_redirected_to_the_owner_makes_the_producer_there() -> None:
    owner = FakeBroker(
        lookup=lambda cmd: lookup_answer(b"", 1, 1, cmd[2]),
        producer=frame(17, b"\x08\x09\x12\x0e" + NAME),
    )
    owner.lookup = lambda cmd: lookup_answer(owner.url, 1, 1, cmd[2])
    first = FakeBroker(lookup=lambda cmd: lookup_answer(owner.url, 0, 1, cmd[2]))
    try:
        conn = LaneConn(_endpoints(first.port), TOPIC, 2.0)
        conn.connect()
        assert conn.sock is not None and conn.sock.getblocking() is False
        assert conn.producer_name == NAME and conn.generation == 1
        assert [k for k, _ in first.got] == [2, 19, 23]  # CONNECT, PONG (its PING), LOOKUP
        assert first.got[2][1][1] == TOPIC.encode() and first.got[2][1].get(3, 0) == 0
        kinds = [k for k, _ in owner.got]
        assert kinds == [2, 19, 23, 5]  # asked again there, as authoritative, then PRODUCER
        assert owner.got[2][1][3] == 1
        assert owner.got[3][1][1] == TOPIC.encode() and owner.got[3][1][2] == 1
        conn.close()
        assert conn.sock is None
    finally:
        first.close()
        owner.close()


def test_a_producer_the_broker_refuses_names_every_broker() -> None:
    refusing = FakeBroker(producer=frame(14, b"\x08\x09\x10\x06\x1a\x0fTopic not ready"))
    refusing.lookup = lambda cmd: lookup_answer(refusing.url, 1, 1, cmd[2])
    closed = socket.create_server(("127.0.0.1", 0))
    dead = closed.getsockname()[1]
    closed.close()  # nothing listens there: refused
    try:
        conn = LaneConn(_endpoints(refusing.port, dead), TOPIC, 2.0)
        conn.next_node = 0
        with pytest.raises(
            DriverError,
            match=r"cannot make a producer on .*127\.0\.0\.1:\d+: .*error 6: Topic not ready; "
            r"127\.0\.0\.1:\d+: ",
        ):
            conn.connect()
        assert conn.sock is None and conn.generation == 0
    finally:
        refusing.close()
