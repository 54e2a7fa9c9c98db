"""The sender's publish frames (mqlab/brokers/rabbitmq/publishing.py) against pika's own
marshaling of the same publish (``pika.frame``: what ``basic_publish`` writes), and read
back with a frame reader of the test's own."""

from __future__ import annotations

import socket
import struct

import pika
import pytest
from pika import frame, spec
from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport

from mqlab.brokers.rabbitmq.publishing import PublishFrames, ack_frames, emit


def pikas(channel: int, queue: str, body: bytes, body_max: int) -> bytes:
    """What pika's ``Connection._send_message`` writes for ``basic_publish("", queue,
    body, persistent)``."""
    props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
    out = [
        frame.Method(channel, spec.Basic.Publish(exchange="", routing_key=queue)).marshal(),
        frame.Header(channel, len(body), props).marshal(),
    ]
    for at in range(0, len(body), body_max):
        out.append(frame.Body(channel, body[at : at + body_max]).marshal())
    return b"".join(out)


def frames_of(data: bytes) -> list[tuple[int, int, bytes]]:
    out = []
    while data:
        kind, channel, size = struct.unpack_from(">BHL", data)
        assert data[7 + size] == 0xCE
        out.append((kind, channel, data[7 : 7 + size]))
        data = data[8 + size :]
    return out


@pytest.mark.parametrize("size", [0, 1, 1024, 4087, 4088, 4089, 10_000])
@pytest.mark.parametrize("queue", ["q", "mqlab-run-0123456789abcdef", "é" * 20])
def test_a_publish_is_the_bytes_pika_writes(size: int, queue: str) -> None:
    body = bytes(i % 251 for i in range(size))
    f = PublishFrames(3, queue, 4088)
    assert b"".join(f.of(body)) == pikas(3, queue, body, 4088)
    assert b"".join(f.of(body)) == pikas(3, queue, body, 4088)  # the cached header again


def test_a_batch_is_its_publishes_in_order_each_read_back() -> None:
    bodies = [b"a" * 10, b"", b"b" * 9000, b"c" * 10]
    data = PublishFrames(1, "queue-1", 4088).batch(bodies)
    assert data == b"".join(pikas(1, "queue-1", b, 4088) for b in bodies)
    frames = frames_of(data)
    assert {ch for _, ch, _ in frames} == {1}
    got: list[bytes] = []
    for kind, _, payload in frames:
        if kind == 1:
            assert struct.unpack_from(">HH", payload) == (60, 40)  # basic.publish
            got.append(b"")
        elif kind == 2:
            cls, _weight, size, flags, mode = struct.unpack(">HHQHB", payload)
            assert (cls, flags, mode) == (60, 0x1000, 2)  # persistent, nothing else
            want = len(bodies[len(got) - 1])
            assert size == want
        else:
            assert kind == 3 and len(payload) <= 4088
            got[-1] += payload
    assert got == bodies


def test_a_routing_key_too_long_or_no_room_for_a_body_is_refused() -> None:
    with pytest.raises(ValueError, match="routing key"):
        PublishFrames(1, "q" * 256, 4088)
    with pytest.raises(ValueError, match="body frames"):
        PublishFrames(1, "q", 0)


@pytest.mark.parametrize(
    ("last", "single"), [(0, []), (7, []), (0, [3]), (2**40, [2**40 + 2, 2**40 + 5])]
)
def test_acks_are_the_bytes_pika_writes(last: int, single: list[int]) -> None:
    want = [frame.Method(5, spec.Basic.Ack(last, multiple=True)).marshal()] if last else []
    want += [frame.Method(5, spec.Basic.Ack(tag)).marshal() for tag in single]
    assert ack_frames(5, last, single) == b"".join(want)


class FakeTransport(_AsyncPlaintextTransport):
    """pika's plaintext transport over one end of a socket pair, without its I/O loop."""

    def __init__(self, sock: socket.socket):  # noqa: D107 - pika's own __init__ wants a loop
        self._sock = sock
        self._state = self._STATE_ACTIVE
        self._tx_buffered_byte_count = 0


class FakeImpl:
    def __init__(self, transport: FakeTransport):
        self._transport = transport
        self.bytes_sent = self.frames_sent = 0
        self.queued: list[bytes] = []

    def _adapter_emit_data(self, data: bytes) -> None:
        self.queued.append(data)


def test_emit_writes_at_once_unless_pika_has_bytes_queued_or_the_socket_is_full() -> None:
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        b.settimeout(5)
        impl = FakeImpl(FakeTransport(a))
        assert emit(impl, b"frames-1") and b.recv(100) == b"frames-1"
        assert (impl.bytes_sent, impl.frames_sent, impl.queued) == (8, 1, [])
        impl._transport._tx_buffered_byte_count = 3  # pika's own bytes wait: after them
        assert not emit(impl, b"frames-2") and impl.queued == [b"frames-2"]
        impl._transport._tx_buffered_byte_count = 0
        big = b"x" * (1 << 24)  # more than the socket takes: the rest queued, in order
        assert not emit(impl, big)
        got = bytearray()
        while True:
            try:
                got += b.recv(1 << 20)
            except BlockingIOError:
                break
            if len(got) >= len(big) - len(impl.queued[-1]):
                break
        assert bytes(got) + impl.queued[-1] == big
        assert impl.bytes_sent == 16 + len(big)
    finally:
        a.close()
        b.close()
