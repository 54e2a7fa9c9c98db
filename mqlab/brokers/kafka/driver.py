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
  consumer that only ``assign()``s and never commits. The committed offsets are asked
  again while the group's coordinator is not ready or has moved (a cluster just started,
  a broker killed), for up to ``COORDINATOR_WAIT_S``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mqlab.brokers.base import (
    IDENTIFY_PREFIX_BYTES,
    Driver,
    LaneReceipt,
    Receiver,
    Remaining,
    Sender,
)
from mqlab.brokers.kafka import lanes
from mqlab.brokers.kafka.config import Settings, bootstrap, producer_config, topic_config
from mqlab.brokers.kafka.producer import SharedProducer
from mqlab.brokers.kafka.receiver import KafkaReceiver
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)


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
        return AdminClient({"bootstrap.servers": bootstrap(self.endpoints)})

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
                "bootstrap.servers": bootstrap(self.endpoints),
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
            for tp in _committed(c, parts):
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
        return KafkaReceiver(self.settings, self.endpoints, self.topic, self.group)

    def receives_in_lanes(self) -> bool:
        """A worker's receivers fetch in lanes where the record reader is built and the
        producers do not compress (``mqlab.brokers.kafka.lanes``)."""
        return lanes.receives_in_lanes(self.settings)

    def receive_path(self) -> str:
        return "compiled-lanes" if self.receives_in_lanes() else "python"

    def receive_lanes(
        self,
        receivers: Sequence[Receiver],
        max_messages: int,
        until_ns: int,
        wall_offset_ns: int,
        wake_fd: int,
    ) -> list[LaneReceipt]:
        """Each receiver's fetches in flight together, recorded and acked as they come
        (``lanes.py`` says how; a fetch brings what it brings, ``max_messages`` aside)."""
        s: Settings = self.settings
        return lanes.receive_lanes(
            receivers, s.fetch_wait_max_ms, until_ns, wall_offset_ns, wake_fd
        )

    def server_versions(self) -> list[str]:
        """The Kafka protocol reports no version: the launcher's, else each broker's id."""
        server = self.endpoints.extra.get("server")
        if server:
            return [str(server)]
        brokers = self._admin().list_topics(timeout=10).brokers
        return [f"Kafka API broker {b.id} ({b.host}:{b.port})" for b in brokers.values()]


# the group's coordinator is not ready yet, or moved (a cluster just started, a broker
# killed): librdkafka's committed() raises these rather than asking again
COORDINATOR_ERRORS = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)
COORDINATOR_WAIT_S = 30.0


def _committed(c: Consumer, parts: list[TopicPartition]) -> list[TopicPartition]:
    """The group's committed offsets of ``parts``, asked again while its coordinator is
    not ready (at most ``COORDINATOR_WAIT_S``)."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        try:
            return list(c.committed(parts, timeout=10))
        except KafkaException as e:
            if e.args[0].code() not in COORDINATOR_ERRORS or time.monotonic() > deadline:
                raise
            LOG.debug("kafka: committed offsets: %s; asking again", e)
            time.sleep(0.5)


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
