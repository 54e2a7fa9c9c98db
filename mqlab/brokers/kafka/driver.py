"""Kafka API (confluent-kafka): one topic, one consumer group; also used for Redpanda.

- setup: a topic with ``partitions`` partitions, replication factor ``replicas``
  and ``min.insync.replicas``; with ``flush_messages`` N > 0 also the topic's
  ``flush.messages`` N (every replica fsyncs its log after N messages: 1 is a flush
  per message), else Kafka's default (no fsync of its own: the OS flushes).
- send: produce the batch (``acks=all``, idempotence on, ``linger_ms`` and
  ``compression`` as the producer's ``linger.ms`` and ``compression.type``, Nagle off;
  ``linger_ms`` 5 by default, as librdkafka and Kafka's Java producer since 4.0),
  then wait for its delivery reports: a send returns once every message's report arrived
  without error. Each batch counts only its own reports: a late report of an earlier
  batch (one whose send timed out) is logged and never counts for or against another.
  With a linger, the senders of a driver (a worker process) share one producer whose
  reports one thread serves; without, each sender has its own and serves its own reports
  (``mqlab.brokers.kafka.producer`` says why).
- receive: poll the group's consumer; each receiver joins the group when made
  and waits for its partition assignment, so partitions (and hence messages)
  belong to one receiver at a time.
- ack: marks offsets done; the contiguous done prefix of each partition is
  committed synchronously every ``commit_interval_s`` (mqperf: 10 s, receiving
  blocked meanwhile), at once with 0, and on close. Unacked messages of a
  receiver that dies come again to the group after the rebalance (at least
  once): ``redelivery_timeout_s`` is the session timeout plus ``commit_interval_s``.
- gaps: offsets are committed only as a run contiguous from the partition's committed
  offset at assignment, so an offset never handed out is never committed over. A fetch
  that skips offsets (seen on tansu under concurrent produce: a record in the log but
  not returned) is caught before delivery: the partition is fetched again from the
  expected offset (at most ``GAP_RETRIES`` times; then commits stop before the gap, and
  the messages come again or show as undrained, never as silently committed).
- redelivery: Kafka has no redelivery flag. Every commit carries, per partition,
  the highest offset this consumer delivered (metadata ``delivered=<offset>``);
  on assignment a consumer reads the committed metadata and flags deliveries at
  or below that mark as redelivered. A consumer also keeps its own marks of the
  partitions it owned before. Marks of a consumer that died before committing
  are lost. tansu (the local stand-in, 0.6) accepts commit metadata but returns
  none: there only a consumer's own marks work (a partition that comes back to
  it), not those of an earlier owner.
- remaining: per partition, the end of the log minus the group's committed
  offset (ready plus delivered-but-uncommitted; no in-flight count). The end is
  the high watermark, then the partition is read on from there until its end,
  since tansu's watermark is too low (the base offset of the last record batch,
  plus 1). ``identify`` reads every message from the committed offset on with a
  consumer that only ``assign()``s and never commits.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mqlab.brokers.base import (
    IDENTIFY_PREFIX_BYTES,
    Delivery,
    Driver,
    Receiver,
    Remaining,
    Sender,
)
from mqlab.brokers.kafka.offsets import GAP_RETRIES, OffsetTracker, mark_metadata, parse_mark
from mqlab.brokers.kafka.producer import SharedProducer
from mqlab.errors import DriverError
from mqlab.typed import spec

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    replicas: int = spec(3, min=1, max=15, help="topic replication factor")
    min_insync_replicas: int = spec(2, min=1, max=15)
    partitions: int = spec(64, min=1, max=10_000)
    acks: str = spec("all", choices=("all", "1", "0"))
    idempotence: bool = spec(True, help="enable.idempotence on the producer")
    linger_ms: float = spec(
        5.0,
        min=0,
        help="producer linger.ms; 5 is the default of librdkafka and of Kafka's own Java "
        "producer since 4.0 (KIP-1030); 0 sends each message as soon as it is produced",
    )
    compression: str = spec(
        "none",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        help="producer compression.type (brokers-bench compared none, gzip and snappy)",
    )
    flush_messages: int = spec(
        0, min=0, help="topic flush.messages (fsync every N messages); 0: Kafka's default"
    )
    commit_interval_s: float = spec(
        10.0, min=0, help="commit acked offsets this often; 0: every ack"
    )
    session_timeout_ms: int = spec(10_000, min=1000)
    fetch_wait_max_ms: int = spec(100, min=0)
    send_timeout_s: float = spec(30.0, min=0.1)
    assignment_timeout_s: float = spec(60.0, min=1, help="how long a new receiver waits to join")
    prefetch: int = spec(500, min=1, help="messages a receiver buffers ahead of the worker")


def topic_config(s: Settings) -> dict[str, str]:
    """The topic's own configuration: its in-sync minimum and, if set, its flush interval."""
    config = {"min.insync.replicas": str(s.min_insync_replicas)}
    if s.flush_messages:
        config["flush.messages"] = str(s.flush_messages)
    return config


def _bootstrap(endpoints: Any) -> str:
    return ",".join(f"{n.host}:{n.port}" for n in endpoints.nodes)


def producer_config(s: Settings, endpoints: Any) -> dict[str, Any]:
    """The senders' producer: the profile's acks, idempotence, linger and compression;
    Nagle off, as the Java client's sockets (TCP_NODELAY)."""
    return {
        "bootstrap.servers": _bootstrap(endpoints),
        "acks": s.acks,
        "enable.idempotence": s.idempotence,
        "linger.ms": s.linger_ms,
        "compression.type": s.compression,
        "message.timeout.ms": int(s.send_timeout_s * 1000),
        "socket.nagle.disable": True,
    }


class KafkaSender(Sender):
    """A sender on the driver's shared producer when the profile lingers, else on a
    producer of its own (``mqlab.brokers.kafka.producer`` says why)."""

    def __init__(self, driver: KafkaDriver):
        self.topic = driver.topic
        self.timeout = driver.settings.send_timeout_s
        self.shared = driver.producer if driver.producer.shared else driver.own()
        self.shared.open()

    def send(self, batch: Sequence[bytes]) -> None:
        try:
            pending = self.shared.produce(self.topic, batch)
        except (BufferError, KafkaException) as e:
            raise DriverError(f"kafka: produce failed: {e}") from e
        if not self.shared.wait(pending, self.timeout) or pending.errors:
            pending.abandoned = True  # its late reports count for no other batch
            raise DriverError(
                f"kafka: {pending.waiting} messages unconfirmed after {self.timeout} s, "
                f"errors: {pending.errors[:3]}"
            )

    def close(self) -> None:
        self.shared.close(self.timeout)


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

    def __init__(self, driver: KafkaDriver):
        s: Settings = driver.settings
        self.topic = driver.topic
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
        self.c = Consumer(
            {
                "bootstrap.servers": _bootstrap(driver.endpoints),
                "group.id": driver.group,
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
            target=self._background, daemon=True, name=f"kafka-poll-{driver.group}"
        )
        self.poller.start()
        deadline = time.monotonic() + s.assignment_timeout_s
        while not self.assigned:  # join the group before returning
            if time.monotonic() > deadline:
                self.close()
                raise DriverError(
                    f"kafka: no partition assignment for group {driver.group} "
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
            self._flow()
            if len(self.buffer) < max_messages:  # what is fetched already, without waiting
                self._keep(self.c.consume(max_messages - len(self.buffer), 0))
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

    def close(self) -> None:
        self.closing.set()
        self.poller.join()
        with contextlib.suppress(DriverError):
            self._commit()
        self.c.close()


class KafkaDriver(Driver):
    name = "kafka"
    Settings = Settings
    client_libraries = ("confluent-kafka",)
    identifies_remaining = True

    def __init__(self, settings: Any, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        self.topic = queue
        self.group = f"{queue}-workers"
        make = functools.partial(Producer, producer_config(self.settings, endpoints))
        self.producer = SharedProducer(make, shared=self.settings.linger_ms > 0)

    def own(self) -> SharedProducer:
        """A producer for one sender alone (it serves its own delivery reports)."""
        return SharedProducer(self.producer.make, shared=False)

    def _admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": _bootstrap(self.endpoints)})

    def setup(self) -> None:
        s: Settings = self.settings
        admin = self._admin()
        if self.topic in admin.list_topics(timeout=10).topics:
            return
        topic = NewTopic(
            self.topic,
            num_partitions=s.partitions,
            replication_factor=s.replicas,
            config=topic_config(s),
        )
        try:
            admin.create_topics([topic])[self.topic].result(30)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise DriverError(f"kafka: cannot create topic {self.topic}: {e}") from e

    def teardown(self) -> None:
        admin = self._admin()
        try:
            admin.delete_topics([self.topic])[self.topic].result(30)
        except KafkaException as e:
            LOG.debug("kafka: delete topic %s: %s", self.topic, e)

    @property
    def redelivery_timeout_s(self) -> float:
        s: Settings = self.settings
        return s.session_timeout_ms / 1000 + s.commit_interval_s

    def remaining(self, identify: bool = False) -> Remaining:
        """Messages after the group's committed offsets (see the module docstring)."""
        c = Consumer(
            {
                "bootstrap.servers": _bootstrap(self.endpoints),
                "group.id": self.group,  # only to read its committed offsets: never joins
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
            }
        )
        try:
            topic = c.list_topics(self.topic, timeout=10).topics[self.topic]
            if topic.error is not None:
                raise DriverError(f"kafka: topic {self.topic}: {topic.error}")
            parts = [TopicPartition(self.topic, p) for p in sorted(topic.partitions)]
            count, starts = 0, {}
            for tp in c.committed(parts, timeout=10):
                low, high = c.get_watermark_offsets(tp, timeout=10, cached=False)
                start = max(low, tp.offset)  # no commit yet (negative): from the beginning
                if identify:  # read all of it
                    starts[tp.partition] = start
                else:  # count up to the watermark, read on from there (tansu's is too low)
                    count += max(0, high - start)
                    starts[tp.partition] = max(start, high)
            n, payloads = _read_to_end(c, self.topic, starts, self.identify_cap if identify else 0)
        except KafkaException as e:
            raise DriverError(f"kafka: cannot read the offsets of {self.topic}: {e}") from e
        finally:
            c.close()
        return Remaining(count + n, payloads if identify else None)

    def sender(self) -> Sender:
        return KafkaSender(self)

    def receiver(self) -> Receiver:
        return KafkaReceiver(self)

    def server_versions(self) -> list[str]:
        """The Kafka protocol reports no version: the launcher's, else each broker's id."""
        server = self.endpoints.extra.get("server")
        if server:
            return [str(server)]
        brokers = self._admin().list_topics(timeout=10).brokers
        return [f"Kafka API broker {b.id} ({b.host}:{b.port})" for b in brokers.values()]


def _read_to_end(
    c: Consumer, topic: str, starts: dict[int, int], keep: int, idle_s: float = 10.0
) -> tuple[int, list[bytes]]:
    """Read each partition from its start offset to its end (its EOF event) without
    committing: how many messages, and the first bytes of the first ``keep``."""
    c.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
    open_parts, n = set(starts), 0
    kept: list[bytes] = []
    last_event = time.monotonic()
    while open_parts:
        m = c.poll(0.1)
        if m is None:
            if time.monotonic() - last_event > idle_s:
                raise DriverError(f"kafka: no end of partitions {sorted(open_parts)} of {topic}")
            continue
        last_event = time.monotonic()
        err = m.error()
        if err is not None and err.code() == KafkaError._PARTITION_EOF:
            open_parts.discard(m.partition())
        elif err is not None:
            raise DriverError(f"kafka: reading {topic}: {err}")
        elif m.partition() in open_parts:
            n += 1
            if len(kept) < keep:
                kept.append(bytes(m.value() or b"")[:IDENTIFY_PREFIX_BYTES])
    return n, kept


DRIVER = KafkaDriver
