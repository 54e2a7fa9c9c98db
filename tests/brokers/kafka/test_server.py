"""Kafka only, on the local stand-in (tansu): redeliveries are flagged from the delivered marks.

Kafka has no redelivery flag; the driver commits, per partition, the highest offset it
delivered (commit metadata) and keeps its own marks of partitions it owned before. These
tests move partitions between two receivers by rebalancing and check the flags.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from mqlab import envelope
from mqlab.brokers.base import Delivery
from mqlab.brokers.kafka.config import bootstrap
from mqlab.brokers.kafka.driver import KafkaDriver
from tests.brokers.conftest import driver_on
from tests.brokers.test_contract import _messages
from tests.conftest import SharedLab

pytestmark = pytest.mark.integration
N = 12


@pytest.fixture
def driver(shared_lab: SharedLab) -> Iterator[KafkaDriver]:
    with driver_on(shared_lab, "kafka", "marks") as d:
        yield d


def keeps_commit_metadata(driver: KafkaDriver) -> bool:
    """Whether the broker returns the metadata of a commit (tansu 0.6 drops it)."""
    c = Consumer(
        {"bootstrap.servers": bootstrap(driver.endpoints), "group.id": f"probe-{uuid.uuid4()}"}
    )
    try:
        tp = TopicPartition(driver.topic, 0, 0, metadata="probe")
        c.commit(offsets=[tp], asynchronous=False)
        return bool(c.committed([TopicPartition(driver.topic, 0)], timeout=10)[0].metadata)
    finally:
        c.close()


def _take(receivers: list[Any], seqs: set[int], timeout_s: float = 30) -> list[list[Delivery]]:
    """Receive (without acking) from all receivers until ``seqs`` all came; per receiver."""
    got: list[list[Delivery]] = [[] for _ in receivers]
    deadline = time.monotonic() + timeout_s
    seen: set[int] = set()
    while not seqs <= seen and time.monotonic() < deadline:
        for i, r in enumerate(receivers):
            batch = r.receive(10, 0.1)
            got[i] += batch
            seen |= {_seq(d) for d in batch}
    assert seqs <= seen, f"missing {sorted(seqs - seen)}"
    return got


def _seq(d: Delivery) -> int:
    return envelope.decode(d.payload)[1]


def _spread(driver: KafkaDriver, messages: list[bytes]) -> None:
    """Produce round-robin over all partitions, so both receivers get messages."""
    p = Producer({"bootstrap.servers": bootstrap(driver.endpoints), "acks": "all"})
    partitions = driver.settings.partitions
    for i, m in enumerate(messages):
        p.produce(driver.topic, m, partition=i % partitions)
    assert p.flush(30) == 0


def test_redeliveries_after_a_rebalance_are_flagged(driver: KafkaDriver) -> None:
    metadata_kept = keeps_commit_metadata(driver)
    _spread(driver, _messages(N))
    a = driver.receiver()
    b: Any = None
    try:
        (first,) = _take([a], set(range(N)))
        assert not any(d.redelivered for d in first)

        b = driver.receiver()  # the group rebalances: a gets half of its partitions back
        again_a, again_b = _take([a, b], set(range(N)))
        assert again_a and again_b, "a receiver got no partition with messages"
        # a delivered these before: its own marks flag them
        assert all(d.redelivered for d in again_a)
        # a handed these over with its marks in the commit metadata: flagged where the
        # broker keeps commit metadata (real Kafka), not on tansu
        assert [d.redelivered for d in again_b] == [metadata_kept] * len(again_b)

        b.close()  # dies without acking: a gets b's partitions back, and knows them
        b = None
        back = {_seq(d) for d in again_b}
        (returned,) = _take([a], back)
        assert all(d.redelivered for d in returned if _seq(d) in back)
    finally:
        for r in (b, a):
            if r is not None:
                r.close()


def test_a_prefetched_message_is_handed_out_at_once(driver: KafkaDriver) -> None:
    """The helper thread prefetches: a receive given no time at all (timeout 0, so it never
    polls the consumer itself) still hands out the message sent before it, from the
    buffer the helper filled meanwhile."""
    s, r = driver.sender(), driver.receiver()
    try:
        for seq in range(10):
            s.send(_messages(seq + 1)[seq:])
            got: list = []
            deadline = time.monotonic() + 30  # a guard against hanging, not a timed assertion
            while not got and time.monotonic() < deadline:
                time.sleep(0.1)  # fetched and buffered by the helper meanwhile
                got = r.receive(10, 0)
            assert [_seq(d) for d in got] == [seq]
            r.ack(got)
    finally:
        s.close()
        r.close()


def test_receivers_join_one_by_one_onto_a_backlog(driver: KafkaDriver) -> None:
    """A receiver whose prefetch buffer is full still serves its group's rebalances: with a
    backlog, a first receiver fills its buffer at once and used to stop polling, so a second
    one never got a partition (the bench's 8 receiver threads on a preloaded topic). Every
    message still comes once to one of them."""
    settings = dataclasses.replace(driver.settings, prefetch=20, assignment_timeout_s=30)
    small = KafkaDriver(settings, driver.endpoints, driver.topic)
    n = 200
    _spread(driver, _messages(n))
    a = small.receiver()
    b: Any = None
    try:
        time.sleep(0.5)  # a's helper fills its buffer meanwhile
        assert len(a.buffer) >= 20
        b = small.receiver()  # raised "no partition assignment" after 30 s before
        got = _take([a, b], set(range(n)))
        seqs = [_seq(d) for batch in got for d in batch]
        assert sorted(seqs) == list(range(n))  # none skipped by the pauses, none twice
        assert got[0] and got[1]
    finally:
        for r in (b, a):
            if r is not None:
                r.close()


class _CountingPauses:
    """The receiver's consumer, its pause calls counted."""

    def __init__(self, consumer: Any) -> None:
        self.consumer, self.pauses = consumer, 0

    def pause(self, partitions: Any) -> None:
        self.pauses += 1
        self.consumer.pause(partitions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


def test_a_receiver_receiving_takes_its_messages_itself(driver: KafkaDriver) -> None:
    """While the worker receives, its receiver polls the consumer itself and the helper
    stays out, so the prefetch buffer never fills and the partitions are not paused and
    resumed every few receives (each resume fetched again what the pause dropped). The
    helper's idle window is made endless here, so the outcome does not hang on timing:
    at most the pause of what the helper buffered before the first receive."""
    settings = dataclasses.replace(driver.settings, prefetch=20)
    small = KafkaDriver(settings, driver.endpoints, driver.topic)
    n = 300
    _spread(driver, _messages(n))
    r = small.receiver()
    try:
        r.IDLE_S = 1e9
        with r.lock:
            counting = _CountingPauses(r.c)
            r.c = counting
        got = _take([r], set(range(n)))[0]
        r.ack(got)
        assert sorted(_seq(d) for d in got) == list(range(n))  # each once, none skipped
        assert counting.pauses <= 1
        assert r.receive(10, 0) == []  # the buffer is empty: fetching goes on
        assert not r.paused
    finally:
        r.close()
