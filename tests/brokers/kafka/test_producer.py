"""The senders' producer accounting (mqlab.brokers.kafka.producer) with a fake producer:
each sender's batch is done by its own delivery reports only."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from mqlab.brokers.kafka.producer import Pending, SharedProducer


class FakeProducer:
    """Queues each produced message's report callback; ``poll`` serves those let through
    by ``release`` (err per value: None, or an error), as librdkafka's poll serves reports."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queued: list[tuple[bytes, Callable[[Any, Any], None]]] = []
        self.ready: list[tuple[Callable[[Any, Any], None], Any]] = []
        self.flushed = 0
        self.fail_at: bytes | None = None

    def produce(self, topic: str, value: bytes, on_delivery: Any) -> None:
        if value == self.fail_at:
            raise BufferError("queue full")
        with self.cond:
            self.queued.append((value, on_delivery))

    def release(self, outcome: Callable[[bytes], Any]) -> None:
        """Let every queued report through, each with ``outcome(value)`` as its error."""
        with self.cond:
            self.ready += [(cb, outcome(v)) for v, cb in self.queued]
            self.queued = []
            self.cond.notify_all()

    def poll(self, timeout: float) -> int:
        with self.cond:
            if not self.ready:
                self.cond.wait(timeout)
            ready, self.ready = self.ready, []
        for cb, err in ready:
            cb(err, None)
        return len(ready)

    def flush(self, timeout: float) -> int:
        self.flushed += 1
        return len(self.queued)


@pytest.mark.parametrize("shared", [True, False])
def test_a_batch_is_done_by_its_own_reports(shared: bool) -> None:
    fake = FakeProducer()
    sp = SharedProducer(lambda: fake, shared=shared)
    sp.open()
    try:
        a = sp.produce("t", [b"a1", b"a2", b"a3"])
        assert a.waiting == 3 and not a.done.is_set()
        fake.release(lambda v: None)
        assert sp.wait(a, 5)
        assert a.waiting == 0 and a.errors == []
    finally:
        sp.close(1)
    assert fake.flushed == 1


def test_an_error_of_one_senders_batch_does_not_fail_anothers() -> None:
    fake = FakeProducer()
    sp = SharedProducer(lambda: fake)
    sp.open()
    sp.open()
    try:
        a = sp.produce("t", [b"a1", b"a2"])
        b = sp.produce("t", [b"b1", b"b2"])
        fake.release(lambda v: "boom" if v == b"a2" else None)
        assert sp.wait(a, 5) and a.errors == ["boom"]
        assert sp.wait(b, 5) and b.errors == [] and b.waiting == 0
    finally:
        sp.close(1)
        sp.close(1)


def test_late_reports_of_an_abandoned_batch_count_for_no_other() -> None:
    fake = FakeProducer()
    sp = SharedProducer(lambda: fake)
    sp.open()
    try:
        old = sp.produce("t", [b"o1", b"o2"])
        assert not sp.wait(old, 0.05)  # its sender timed out
        old.abandoned = True
        new = sp.produce("t", [b"n1", b"n2"])
        fake.release(lambda v: "late" if v.startswith(b"o") else None)
        assert sp.wait(new, 5) and new.errors == [] and new.waiting == 0
        assert old.errors == [] and old.waiting == 2 and not old.done.is_set()
    finally:
        sp.close(1)


def test_a_produce_failing_half_way_abandons_its_batch() -> None:
    fake = FakeProducer()
    sp = SharedProducer(lambda: fake, shared=False)
    sp.open()
    fake.fail_at = b"x2"
    try:
        with pytest.raises(BufferError):
            sp.produce("t", [b"x1", b"x2", b"x3"])
        fake.fail_at = None
        nxt = sp.produce("t", [b"y1"])
        fake.release(lambda v: None)  # x1's report comes with y1's
        assert sp.wait(nxt, 5) and nxt.waiting == 0
    finally:
        sp.close(1)


def test_one_producer_for_all_its_senders_made_once_and_closed_by_the_last() -> None:
    made: list[FakeProducer] = []

    def make() -> FakeProducer:
        made.append(FakeProducer())
        return made[-1]

    sp = SharedProducer(make)
    for _ in range(3):
        sp.open()
    assert len(made) == 1 and sp.poller is not None and sp.poller.is_alive()
    poller = sp.poller
    sp.close(1)
    sp.close(1)
    assert made[0].flushed == 0 and poller.is_alive()
    sp.close(1)
    assert made[0].flushed == 1 and not poller.is_alive() and sp.p is None


def test_an_empty_batch_is_done_at_once() -> None:
    assert Pending(1, 0).done.is_set()
