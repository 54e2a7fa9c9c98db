"""A sender's publishes written as AMQP 0-9-1 frames (section 4.2.6: a content method is
its method frame, a content header frame and body frames), a batch's frames joined into
one write.

pika's ``basic_publish`` makes a ``Basic.Publish``, a ``BasicProperties``, three frame
objects and their marshaled bytes for every message, and its blocking channel flushes
each one through the I/O loop: most of a RabbitMQ sender's CPU per message
(docs/development.md). The frames of a publish to one queue differ only in the body
(and its size in the content header), so ``PublishFrames`` writes the method frame once
and a content header once per body size. pika keeps the connection, its channel, the
heartbeats and every frame the broker sends (confirms among them).

Layouts: a frame is its type (1 method, 2 content header, 3 body), channel (u16),
payload size (u32), payload and the frame end 0xCE. ``basic.publish`` (class 60, method
40): a reserved u16, the exchange (short string: the default exchange, ""), the routing
key (the queue's name), mandatory and immediate bits (both off). The content header:
class 60, weight 0, the body's size (u64), property flags (u16: delivery-mode alone, bit
12) and delivery-mode 2 (persistent). A body longer than the connection's frame size
less 8 is split over body frames."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport

FRAME = struct.Struct(">BHL")  # type, channel, payload size
FRAME_END = b"\xce"
METHOD, HEADER, BODY = 1, 2, 3
BASIC = 60
PUBLISH = 40
DELIVERY_MODE_FLAG = 1 << 12  # basic properties' flag bits: delivery-mode's
PERSISTENT = 2
ACK = 80
_ACK = struct.Struct(">BHLHHQBB")  # the frame, class, method, delivery tag, multiple, end
_HEADER = struct.Struct(">HHQHB")  # class, weight, body size, property flags, delivery mode


class PublishFrames:
    """The frames of persistent publishes to ``queue`` through the default exchange on
    ``channel``, bodies at most ``body_max`` bytes a body frame."""

    def __init__(self, channel: int, queue: str, body_max: int):
        if body_max < 1:
            raise ValueError(f"rabbitmq: body frames of {body_max} bytes")
        key = queue.encode()
        if len(key) > 255:
            raise ValueError(f"rabbitmq: a routing key of {len(key)} bytes (at most 255)")
        payload = struct.pack(">HHHB", BASIC, PUBLISH, 0, 0) + bytes([len(key)]) + key + b"\0"
        self.channel = channel
        self.body_max = body_max
        self.method = FRAME.pack(METHOD, channel, len(payload)) + payload + FRAME_END
        self._heads: dict[int, bytes] = {}  # body size -> method and content header frames

    def _head(self, size: int) -> bytes:
        header = _HEADER.pack(BASIC, 0, size, DELIVERY_MODE_FLAG, PERSISTENT)
        head = self.method + FRAME.pack(HEADER, self.channel, len(header)) + header + FRAME_END
        if len(self._heads) < 64:  # a run's sizes are few: keep them
            self._heads[size] = head
        return head

    def of(self, body: bytes) -> list[bytes]:
        """One publish of ``body``: its frames' bytes, in order."""
        size = len(body)
        head = self._heads.get(size) or self._head(size)
        if size <= self.body_max:
            if not size:
                return [head]
            return [head, FRAME.pack(BODY, self.channel, size), body, FRAME_END]
        out = [head]
        for at in range(0, size, self.body_max):
            part = body[at : at + self.body_max]
            out += [FRAME.pack(BODY, self.channel, len(part)), part, FRAME_END]
        return out

    def batch(self, bodies: Sequence[bytes]) -> bytes:
        """The publishes of ``bodies``, in order, as one write."""
        out: list[bytes] = []
        for body in bodies:
            out += self.of(body)
        return b"".join(out)


def ack_frames(channel: int, last: int, single: Sequence[int]) -> bytes:
    """``basic.ack`` (class 60, method 80: the delivery tag, u64, and the multiple bit) of
    every tag up to ``last`` with ``multiple`` (none if 0), then of each of ``single``."""
    out = [_ACK.pack(METHOD, channel, 13, BASIC, ACK, last, 1, 0xCE)] if last else []
    out += [_ACK.pack(METHOD, channel, 13, BASIC, ACK, tag, 0, 0xCE) for tag in single]
    return b"".join(out)


def emit(impl: Any, data: bytes) -> bool:
    """``data`` (whole frames) written on pika's connection ``impl`` (a blocking
    connection's ``_impl``) as pika writes its own frames, counted in its bytes sent (its
    heartbeat checker reads them): straight to the socket when pika has nothing queued
    to write (no turn of its I/O loop per write, which was most of a sender's and a
    receiver's flush), else, with what the socket did not take, queued after pika's own
    bytes for its I/O loop to write. True when all of it is on the socket."""
    impl.bytes_sent += len(data)
    impl.frames_sent += 1
    t = impl._transport
    if (
        isinstance(t, _AsyncPlaintextTransport)
        and t._state == t._STATE_ACTIVE
        and t.get_write_buffer_size() == 0
    ):
        try:
            sent = t._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent == len(data):
            return True
        data = data[sent:]
    impl._adapter_emit_data(data)
    return False
