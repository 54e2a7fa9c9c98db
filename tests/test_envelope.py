from __future__ import annotations

import numpy as np
import pytest

from mqlab import envelope


def test_header_round_trip_and_padding() -> None:
    pool = envelope.PayloadPool(1024, seed=3)
    msgs = envelope.encode_batch(sender=9, first_seq=100, n=4, sent_ns=123456789, pool=pool)
    assert [len(m) for m in msgs] == [1024] * 4
    assert [envelope.decode(m) for m in msgs] == [(9, 100 + i, 123456789) for i in range(4)]
    arr = envelope.decode_many(envelope.headers_of(msgs))
    assert arr["seq"].tolist() == [100, 101, 102, 103]
    assert np.all(arr["sender"] == 9) and np.all(arr["sent_ns"] == 123456789)


def test_payloads_come_from_a_random_pool() -> None:
    pool = envelope.PayloadPool(200, pool_size=8, seed=1)
    pads = {pool.pad(i) for i in range(8)}
    assert len(pads) == 8


def test_bad_header_is_rejected() -> None:
    with pytest.raises(envelope.EnvelopeError):
        envelope.decode(b"x" * 30)
    with pytest.raises(envelope.EnvelopeError):
        envelope.decode(b"short")
    with pytest.raises(envelope.EnvelopeError):
        envelope.decode_many(b"y" * 48)


def test_message_smaller_than_header_is_refused() -> None:
    with pytest.raises(ValueError):
        envelope.PayloadPool(10)


def _framed_expected(prefix: bytes, suffix: bytes, msgs: list[bytes]) -> bytes:
    return b"".join(prefix + m + suffix for m in msgs)


def test_framed_batches_are_encode_batch_framed_whatever_the_sizes_and_order() -> None:
    pool = envelope.PayloadPool(100, pool_size=4, seed=5)
    framed = envelope.Framed(pool, b"<head>", b"</>")
    seq = 0
    for n in (3, 10, 1, 12, 12, 5, 7):  # grows, shrinks, grows again; pads rotate
        got = bytes(framed.batch(9, seq, n, 1_000 + seq))
        want = envelope.encode_batch(9, seq, n, 1_000 + seq, pool)
        assert got == _framed_expected(b"<head>", b"</>", want)
        seq += n
    assert framed.n_max == 12
    assert len(framed._templates) <= 4  # one per padding of the pool


def test_framed_keeps_templates_within_its_budget() -> None:
    pool = envelope.PayloadPool(1000, pool_size=16, seed=6)
    frame = 2 + 1000 + 2
    framed = envelope.Framed(pool, b"[[", b"]]", budget_bytes=3 * 10 * frame)
    for i in range(40):
        first = i * 7
        got = bytes(framed.batch(1, first, 10, 5))
        assert got == _framed_expected(b"[[", b"]]", envelope.encode_batch(1, first, 10, 5, pool))
        assert len(framed._templates) <= 3
    tiny = envelope.Framed(pool, b"", b"", budget_bytes=1)  # less than one: still one
    assert bytes(tiny.batch(2, 3, 4, 6)) == b"".join(envelope.encode_batch(2, 3, 4, 6, pool))
