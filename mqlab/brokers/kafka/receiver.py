"""A Kafka receiver: a member of the run's consumer group (``mqlab.brokers.kafka.driver``
says what receive and ack do; ``mqlab.brokers.kafka.lanes`` how it fetches in lanes)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from mqlab.brokers.base import Delivery, Receiver
from mqlab.brokers.kafka.config import Settings, bootstrap
from mqlab.brokers.kafka.offsets import GAP_RETRIES, OffsetTracker, mark_metadata, parse_mark
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)


class KafkaReceiver(Receiver):
    """A group member; a helper thread polls while the worker does not, so rebalances never wait.

    One lock guards the consumer and the receiver's state: confluent-kafka's consumer must
    not be called from two threads at once (a commit while another thread polls hangs).
    While the worker receives (a ``receive`` within ``IDLE_S``), it polls the consumer
    itself and librdkafka's own fetch queue is the prefetch: the helper stays out. Once the
    worker has not received for ``IDLE_S``, the helper takes what is fetched (and serves
    group events) every ``HELPER_PERIOD_S`` without blocking, into a buffer of at most
    ``prefetch`` messages that the next ``receive`` hands out first; a full buffer pauses
    fetching until the worker has emptied it. (The helper used to poll whatever the worker
    did, so a busy receiver's buffer filled, paused and resumed its partitions every few
    receives: librdkafka drops what it fetched ahead for a paused partition and fetches it
    again on resume, so most of what was fetched was fetched again.)"""

    HELPER_PERIOD_S = 0.02
    IDLE_S = 0.5

    def __init__(self, s: Settings, endpoints: Any, topic: str, group: str):
        self.topic = topic
        self.tracker = OffsetTracker()
        self.commit_interval = s.commit_interval_s
        self.last_commit = time.monotonic()
        self.buffer: deque[Any] = deque()
        self.prefetch = s.prefetch
        self.assigned = False
        self.owned: set[int] = set()  # partitions assigned to this consumer right now
        self.paused: bool | None = False  # fetching paused (the buffer is full); None: unknown
        self.gap_tries: dict[tuple[int, int], int] = {}  # (partition, offset) -> seeks back
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.received_at = 0.0  # monotonic time of the worker's last receive
        # in lanes (mqlab.brokers.kafka.lanes): librdkafka fetches nothing (every partition
        # paused), the lanes fetch from the leaders on connections of the receiver's own
        self.in_lanes = False
        self.leaders: dict[int, tuple[str, int]] = {}  # partition -> its leader's address
        self.conns: dict[tuple[str, int], Any] = {}  # address -> fetch.BrokerConn
        # the lanes' lookup of leaders and first offsets under way (lanes.LOOKUPS), if any
        self.lookup: Any = None
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap(endpoints),
                "group.id": group,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": s.session_timeout_ms,
                "heartbeat.interval.ms": max(100, s.session_timeout_ms // 5),
                "fetch.wait.max.ms": s.fetch_wait_max_ms,
                "isolation.level": "read_uncommitted",
            }
        )
        self.c.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        self.poller = threading.Thread(
            target=self._background, daemon=True, name=f"kafka-poll-{group}"
        )
        self.poller.start()
        deadline = time.monotonic() + s.assignment_timeout_s
        while not self.assigned:  # join the group before returning
            if time.monotonic() > deadline:
                self.close()
                raise DriverError(
                    f"kafka: no partition assignment for group {group} "
                    f"after {s.assignment_timeout_s:.0f} s"
                )
            time.sleep(0.02)

    def _background(self) -> None:
        """Serve group events and prefetch while the worker is busy elsewhere."""
        while not self.closing.wait(self.HELPER_PERIOD_S):
            if time.monotonic() - self.received_at < self.IDLE_S:
                continue  # the worker polls the consumer itself
            if not self.lock.acquire(timeout=0.05):
                continue  # a busy lock: the worker is polling
            try:
                # a full buffer pauses fetching but the consumer is still polled: a member
                # that stops polling holds up every rebalance of its group (8 receivers
                # joining one by one onto a topic with a backlog never all got partitions)
                self._keep(self.c.consume(max(1, self._flow()), 0))
            except (DriverError, KafkaException) as e:
                LOG.warning("kafka: %s", e)
            finally:
                self.lock.release()

    def _flow(self) -> int:
        """Room left in the buffer; fetching paused once there is none, resumed once the
        buffer is empty (librdkafka drops what it fetched ahead for a paused partition and
        fetches again from the position handed out, so nothing is skipped)."""
        room = self.prefetch - len(self.buffer)
        pause = (
            room <= 0 if self.paused is None else (room <= 0 or (self.paused and bool(self.buffer)))
        )
        pause = pause or self.in_lanes  # the lanes fetch: librdkafka never does
        if self.owned and (self.paused is None or pause != self.paused):
            tps = [TopicPartition(self.topic, p) for p in sorted(self.owned)]
            try:
                (self.c.pause if pause else self.c.resume)(tps)
                self.paused = pause
            except KafkaException as e:
                LOG.warning("kafka: pause/resume failed: %s", e)
        return room

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        try:  # where each partition starts, and the delivered marks earlier owners committed
            for tp in consumer.committed(partitions, timeout=10):
                self.tracker.start(tp.partition, tp.offset)
                self.tracker.inherit(tp.partition, parse_mark(tp.metadata))
        except KafkaException as e:
            LOG.warning("kafka: no committed offsets at assignment (%s): not marking", e)
        self.owned |= {tp.partition for tp in partitions}
        self.paused = None  # the next _flow pauses or resumes every partition owned now
        self.assigned = True

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        try:
            self._commit()  # hand over what was acked; the rest comes again to the new owner
        except DriverError as e:
            LOG.warning("%s (at revoke: the new owner reads from the last committed offset)", e)
        revoked = {tp.partition for tp in partitions}
        self.owned -= revoked
        self.tracker.forget(sorted(revoked))
        self.buffer = deque(m for m in self.buffer if m.partition() not in revoked)

    def _keep(self, messages: Sequence[Any]) -> None:
        if self.in_lanes:  # fetched before its partition was paused: the lanes fetch it
            return
        for m in messages:
            err = m.error()
            if err is None:
                # a message fetched just before its partition was revoked (the same consume()
                # call can return it after the revoke callback ran) belongs to the new owner:
                # delivering and acking it here would commit an offset for a partition this
                # consumer no longer owns, and could move the group's offset past messages
                # the new owner has not delivered yet
                if m.partition() in self.owned:
                    self.buffer.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                raise DriverError(f"kafka: consume failed: {err}")

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        with self.lock:
            self.received_at = time.monotonic()
            self._maybe_commit()
            room = self._flow()
            if len(self.buffer) < max_messages:  # what is fetched already, without waiting:
                # up to half the prefetch in one call (a call per batch cost a third of
                # the receiver's CPU: docs/development.md), never so many that the buffer
                # fills and pauses fetching while the worker empties it
                want = max(max_messages - len(self.buffer), self.prefetch // 2)
                self._keep(self.c.consume(max(1, min(room, want)), 0))
            while not self.buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                m = self.c.poll(min(left, 0.1))  # returns as soon as a message is fetched
                self._keep([] if m is None else [m])
                if self.buffer and len(self.buffer) < max_messages:
                    self._keep(self.c.consume(max_messages - len(self.buffer), 0))
            self.received_at = time.monotonic()
            out: list[Delivery] = []
            buffer, tracker = self.buffer, self.tracker
            while buffer and len(out) < max_messages:
                m = buffer.popleft()
                p, o = m.partition(), m.offset()
                if o > tracker.expected.get(p, o) and self._skipped(m):
                    continue
                out.append(Delivery(m.value(), (p, o), tracker.delivered(p, o)))
            return out

    def _skipped(self, m: Any) -> bool:
        """A message past the next expected offset of its partition: the fetch skipped some
        (seen on tansu under concurrent produce). Seek back and fetch them again instead of
        handing this one out; after ``GAP_RETRIES`` tries the gap is accepted, and commits
        stop before it (see OffsetTracker), so nothing is ever committed over unread."""
        p, expected = m.partition(), self.tracker.expected.get(m.partition())
        if expected is None or m.offset() <= expected:
            return False
        tries = self.gap_tries.get((p, expected), 0)
        if tries >= GAP_RETRIES:
            return False
        self.gap_tries[(p, expected)] = tries + 1
        LOG.warning(
            "kafka: partition %d: fetched offset %d, %d expected: fetching again from %d",
            p,
            m.offset(),
            expected,
            expected,
        )
        self.buffer = deque(x for x in self.buffer if x.partition() != p)
        try:
            self.c.seek(TopicPartition(self.topic, p, expected))
        except KafkaException as e:
            LOG.warning("kafka: seek failed (%s): the gap is kept, commits stop before it", e)
            self.gap_tries[(p, expected)] = GAP_RETRIES
            return False
        return True

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        with self.lock:
            for d in deliveries:
                self.tracker.ack(*d.handle)
            self._maybe_commit()

    def _maybe_commit(self) -> None:
        if time.monotonic() - self.last_commit >= self.commit_interval:
            self._commit()

    def _commit(self) -> None:
        self.last_commit = time.monotonic()
        offsets = self.tracker.to_commit()
        if not offsets:
            return
        tps = [
            TopicPartition(self.topic, p, offset, metadata=mark_metadata(mark))
            for p, (offset, mark) in sorted(offsets.items())
        ]
        try:
            self.c.commit(offsets=tps, asynchronous=False)
        except KafkaException as e:
            raise DriverError(f"kafka: commit failed: {e}") from e

    def enter_lanes(self) -> None:
        """From now on the lanes fetch (``mqlab.brokers.kafka.lanes``); what librdkafka
        fetched ahead is dropped, never handed out (the lanes fetch it again)."""
        with self.lock:
            if self.in_lanes:
                return
            if any(self.tracker.outstanding.values()):
                raise DriverError("kafka: receivers in lanes take no receiver that handed out")
            self.in_lanes = True
            self.buffer.clear()
            self.paused = None
            self._flow()

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
        self.closing.set()
        self.poller.join()
        if self.lookup is not None:  # no call to the consumer while it closes: the lookup
            # stops before its next call to the brokers once closing is set, each bounded
            concurrent.futures.wait([self.lookup])
        with contextlib.suppress(DriverError):
            self._commit()
        self.c.close()
