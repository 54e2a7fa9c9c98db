"""The receiver's own reading of deliveries off the wire, and its ack plan (no server):
frames made by pika's own encoders, fed in every split a socket could bring them in."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pika import exceptions as pika_exceptions
from pika import frame as pika_frame
from pika import spec as amqp

from mqlab.brokers.rabbitmq.deliveries import Acks, DeliveryReader

CH = 1


class _FakeConn:
    """What the reader uses of pika's connection: its unread bytes, counters, transport,
    and the frames pika itself would process."""

    def __init__(self, unread: bytes = b"") -> None:
        self._frame_buffer = unread
        self._transport = type("T", (), {})()
        self.bytes_received = 0
        self.frames_received = 0
        self.processed: list[Any] = []

    def _process_frame(self, value: Any) -> None:
        self.frames_received += 1  # as pika's _process_frame counts
        self.processed.append(value)


def _delivery(tag: int, body: bytes, redelivered: bool = False, parts: int = 1) -> list[bytes]:
    frames = [
        pika_frame.Method(
            CH, amqp.Basic.Deliver("ctag-" + "x" * tag, tag, redelivered, "", "q")
        ).marshal(),
        pika_frame.Header(CH, len(body), amqp.BasicProperties(delivery_mode=2)).marshal(),
    ]
    step = max(1, -(-len(body) // parts))
    frames += [pika_frame.Body(CH, body[i : i + step]).marshal() for i in range(0, len(body), step)]
    return frames


def _stream() -> tuple[bytes, list[tuple[bytes, int, bool]], list[str]]:
    """Wire bytes, the deliveries they hold and the names of the frames pika must get."""
    heartbeat = pika_frame.Heartbeat().marshal()
    consume_ok = pika_frame.Method(CH, amqp.Basic.ConsumeOk("ctag")).marshal()
    other = pika_frame.Method(2, amqp.Basic.Deliver("c", 9, False, "", "q")).marshal()
    d3 = _delivery(3, b"three" * 300, parts=3)
    frames = [
        consume_ok,
        *_delivery(1, b"one" * 400),
        *_delivery(2, b"", redelivered=True),
        heartbeat,
        *d3[:2],
        heartbeat,  # between a delivery's frames: pika's, the delivery goes on
        *d3[2:],
        other,  # another channel's frames are pika's
        *_delivery(4, bytes(range(256)) * 4),
    ]
    expected = [
        (b"one" * 400, 1, False),
        (b"", 2, True),
        (b"three" * 300, 3, False),
        (bytes(range(256)) * 4, 4, False),
    ]
    pika_gets = ["Basic.ConsumeOk", "Heartbeat", "Heartbeat", "Basic.Deliver"]
    return b"".join(frames), expected, pika_gets


def _names(values: list[Any]) -> list[str]:
    return [v.method.NAME if isinstance(v, pika_frame.Method) else v.NAME for v in values]


def _read(chunks: list[bytes], unread: bytes = b"") -> tuple[_FakeConn, list[Any], int]:
    conn = _FakeConn(unread)
    got: list[Any] = []
    wakes = [0]

    def wake() -> None:
        wakes[0] += 1

    reader = DeliveryReader(conn, CH, lambda *d: got.append(d), wake)
    assert conn._on_data_available == reader.feed  # type: ignore[attr-defined]
    for c in chunks:
        reader.feed(c)
    assert reader.rest == b""
    return conn, got, wakes[0]


@pytest.mark.parametrize("size", [1, 2, 7, 100, 4096, 1 << 20])
def test_deliveries_read_in_order_whatever_the_reads(size: int) -> None:
    data, expected, pika_gets = _stream()
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    conn, got, wakes = _read(chunks)
    assert got == expected
    assert _names(conn.processed) == pika_gets
    assert conn.bytes_received == len(data)  # pika's heartbeat check sees every byte
    assert 1 <= wakes <= len(chunks)


def test_random_splits_and_bytes_pika_had_not_read() -> None:
    data, expected, pika_gets = _stream()
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(data)), 12))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        conn, got, _ = _read(pieces[1:], unread=pieces[0])
        assert got == expected
        assert _names(conn.processed) == pika_gets


def test_a_bad_frame_end_is_pikas_error() -> None:
    frames = _delivery(1, b"abc")
    bad = frames[0][:-1] + b"\x00"
    with pytest.raises(pika_exceptions.InvalidFrameError):
        _read([bad])


def _broker_acks(handed: list[int], calls: list[list[int]]) -> set[int]:
    """Play the receiver's acks against a broker's rules: a tag named must be unacked
    (else the channel closes), a multiple ack acks every unacked tag up to it; every tag
    it acks must have been handed out and named by an ack call so far."""
    acks = Acks()
    unacked = set(handed)
    named: set[int] = set()
    for tags in calls:
        named.update(tags)
        last, single = acks.plan(tags)
        if last:
            assert last in unacked and last in tags
            covered = {t for t in unacked if t <= last}
            assert covered <= named
            unacked -= covered
        for t in single:
            assert t in unacked
            unacked.discard(t)
    return unacked


def test_a_contiguous_batch_is_one_multiple_ack() -> None:
    a = Acks()
    assert a.plan([1, 2, 3]) == (3, [])
    assert a.plan([4, 5]) == (5, [])
    assert a.plan([7, 8]) == (0, [7, 8])  # 6 is not acked: each on its own
    assert a.plan([6]) == (6, [])  # 6 fills the gap; 7 and 8 were acked already
    assert a.plan([9]) == (9, [])
    assert a.floor == 9 and not a.above


def test_acks_in_any_order_ack_exactly_the_named_tags() -> None:
    rng = random.Random(3)
    for _ in range(300):
        handed = list(range(1, 60))
        order = handed[:]
        rng.shuffle(order)
        keep = set(rng.sample(handed, rng.randrange(0, 5)))  # never acked
        named = [t for t in order if t not in keep]
        if rng.random() < 0.5:  # mostly in order, as a receiver acks its batches
            named.sort()
        calls, i = [], 0
        while i < len(named):
            n = rng.randrange(1, 11)
            calls.append(named[i : i + n])
            i += n
        assert _broker_acks(handed, calls) == keep
