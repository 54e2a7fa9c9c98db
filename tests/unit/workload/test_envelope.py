from __future__ import annotations

import numpy as np
import pytest

from mqlab.workload import envelope


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
