"""The sender's publish frames (mqlab/brokers/rabbitmq/publishing.py) against pika's own
marshaling of the same publish (``pika.frame``: what ``basic_publish`` writes), and read
back with a frame reader of the test's own."""

from __future__ import annotations

import struct

import pika
import pytest
from pika import frame, spec

from mqlab.brokers.rabbitmq.publishing import PublishFrames


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
