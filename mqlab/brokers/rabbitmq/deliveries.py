"""The receiver's deliveries read off the wire, and its acks planned per batch.

pika decodes every frame into objects (the Basic.Deliver method, the content header's
BasicProperties, the body) and hands each delivery through its channel and its blocking
adapter's event queue: most of a receiver's CPU per message. ``DeliveryReader`` stands
in front of one pika connection: it reads the frames of each delivery on the
receiver's channel (the Basic.Deliver method frame, the content header frame and the
body frames, AMQP 0-9-1 section 4.2.6) itself and passes every other frame, one at a
time and in order, to pika (channel 0's heartbeats and connection methods, the
channel's other methods: consume-ok, cancel, close). Deliveries come out in the order
the broker sent them; the connection's received-bytes count (pika's heartbeat check)
grows as pika's own reading would grow it.

``Acks`` keeps which delivery tags of a channel are acked, so that a batch acks its
contiguous run of tags in one ``basic.ack`` with ``multiple`` set.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from pika import frame as pika_frame

FRAME = struct.Struct(">BHL")  # type, channel, payload size
FRAME_END = 0xCE
METHOD, HEADER, BODY = 1, 2, 3
DELIVER = struct.pack(">HH", 60, 60)  # basic.deliver: class 60, method 60
TAG = struct.Struct(">QB")  # delivery tag, bits (redelivered: bit 0)
BODY_SIZE = struct.Struct(">Q")  # content header: class (2), weight (2), then this
RECV_BYTES = 1 << 16  # per socket read (pika reads 4 KiB at a time)


class DeliveryReader:
    """Takes the deliveries of ``channel`` off ``conn`` (pika's connection object, open)
    and calls ``sink(body, delivery_tag, redelivered)`` for each, in order, then
    ``wake()`` once per read that brought deliveries (to end a wait for them)."""

    def __init__(
        self,
        conn: Any,
        channel: int,
        sink: Callable[[bytes, int, bool], None],
        wake: Callable[[], None],
    ):
        self.conn = conn
        self.channel = channel
        self.sink = sink
        self.wake = wake
        # the delivery being read: [tag, redelivered, body size (-1: no header yet),
        # body parts, body bytes so far]
        self.pending: list[Any] | None = None
        self.rest, conn._frame_buffer = conn._frame_buffer, b""  # pika's unread bytes
        conn._on_data_available = self.feed  # pika's transport calls this with each read
        conn._transport._MAX_RECV_BYTES = RECV_BYTES

    def feed(self, data: bytes) -> None:
        """Read every whole frame of ``rest + data``; keep the start of the last one."""
        buf = self.rest + data if self.rest else data
        end, pos, read, frames, delivered = len(buf), 0, 0, 0, False
        conn, ch = self.conn, self.channel
        try:
            while end - pos >= 8:
                ftype, channel, size = FRAME.unpack_from(buf, pos)
                start = pos + 7
                stop = start + size  # the frame-end octet
                if stop >= end:
                    break
                nxt = stop + 1
                if channel == ch and buf[stop] == FRAME_END:
                    pending = self.pending
                    if ftype == METHOD and pending is None and buf[start : start + 4] == DELIVER:
                        at = start + 5 + buf[start + 4]  # after the consumer tag (shortstr)
                        tag, bits = TAG.unpack_from(buf, at)
                        self.pending = [tag, bool(bits & 1), -1, [], 0]
                    elif ftype == HEADER and pending is not None and pending[2] < 0:
                        (pending[2],) = BODY_SIZE.unpack_from(buf, start + 4)
                        if pending[2] == 0:
                            self.pending = None
                            self.sink(b"", pending[0], pending[1])
                            delivered = True
                    elif ftype == BODY and pending is not None and pending[2] >= 0:
                        part = buf[start:stop]
                        pending[4] += size
                        if pending[4] < pending[2]:
                            pending[3].append(part)
                        else:
                            self.pending = None
                            body = b"".join([*pending[3], part]) if pending[3] else part
                            self.sink(body, pending[0], pending[1])
                            delivered = True
                    else:
                        ftype = 0
                    if ftype:
                        read += nxt - pos
                        frames += 1
                        pos = nxt
                        continue
                # any other frame is pika's (a bad frame-end too: InvalidFrameError)
                consumed, value = pika_frame.decode_frame(buf[pos:nxt])
                pos = nxt
                conn.bytes_received += consumed
                conn._process_frame(value)
        finally:
            conn.bytes_received += read
            conn.frames_received += frames
            self.rest = buf[pos:]
            if delivered:
                self.wake()


class Acks:
    """Which delivery tags of one channel are acked, to ack a contiguous run in one frame.
    ``floor``: every tag up to it is acked; ``above``: acked tags beyond it. A tag is acked
    once it was handed out and ``ack`` named it; tags run 1, 2, ... in delivery order."""

    def __init__(self) -> None:
        self.floor = 0
        self.above: set[int] = set()

    def plan(self, tags: Sequence[int]) -> tuple[int, list[int]]:
        """Record ``tags`` (handed out, not acked before) as acked; return the tag of one
        ``multiple`` ack covering the longest run of them that, with the tags acked
        before, fills every tag from 1 (0: none), and the tags to ack one by one. The
        multiple ack's own tag is one of ``tags`` (unacked until now): a multiple ack
        names an unacked delivery and covers only handed-out deliveries acked here."""
        todo = sorted(tags)
        k, i, last, above = self.floor, 0, 0, self.above
        while True:
            if i < len(todo) and todo[i] == k + 1:
                k = last = todo[i]
                i += 1
            elif k + 1 in above:
                above.discard(k + 1)
                k += 1
            else:
                break
        self.floor = k
        single = todo[i:]
        above.update(single)
        return last, single
