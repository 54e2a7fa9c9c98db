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

FRAME = struct.Struct(">BHL")  # type, channel, payload size
FRAME_END = b"\xce"
METHOD, HEADER, BODY = 1, 2, 3
BASIC = 60
PUBLISH = 40
DELIVERY_MODE_FLAG = 1 << 12  # basic properties' flag bits: delivery-mode's
PERSISTENT = 2
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
