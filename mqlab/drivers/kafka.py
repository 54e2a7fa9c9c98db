"""Kafka API (confluent-kafka): one topic, one consumer group; also used for Redpanda.

- setup: a topic with ``partitions`` partitions, replication factor ``replicas``
  and ``min.insync.replicas``.
- send: produce the batch (``acks=all``, idempotence on), then flush: a send
  returns once every message's delivery report arrived without error.
- receive: poll the group's consumer; each receiver joins the group when made
  and waits for its partition assignment, so partitions (and hence messages)
  belong to one receiver at a time.
- ack: marks offsets done; the contiguous done prefix of each partition is
  committed synchronously every ``commit_interval_s`` (mqperf: 10 s, receiving
  blocked meanwhile), at once with 0, and on close. Unacked messages of a
  receiver that dies come again to the group after the rebalance (at least
  once). Whether a delivery is a redelivery cannot be known: always False.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mqlab.drivers.base import Delivery, Driver, Receiver, Sender
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
    linger_ms: float = spec(0.0, min=0)
    commit_interval_s: float = spec(
        10.0, min=0, help="commit acked offsets this often; 0: every ack"
    )
    session_timeout_ms: int = spec(10_000, min=1000)
    fetch_wait_max_ms: int = spec(100, min=0)
    send_timeout_s: float = spec(30.0, min=0.1)
    assignment_timeout_s: float = spec(60.0, min=1, help="how long a new receiver waits to join")
    prefetch: int = spec(500, min=1, help="messages a receiver buffers ahead of the worker")


class OffsetTracker:
    """Per partition: offsets handed out in order, and which are acked; what to commit."""

    def __init__(self) -> None:
        self.outstanding: dict[int, deque[int]] = {}
        self.acked: dict[int, set[int]] = {}
        self.next_commit: dict[int, int] = {}  # partition -> offset to commit (exclusive)
        self.dirty: set[int] = set()

    def delivered(self, partition: int, offset: int) -> None:
        self.outstanding.setdefault(partition, deque()).append(offset)
        self.acked.setdefault(partition, set())

    def ack(self, partition: int, offset: int) -> None:
        if partition not in self.outstanding:
            return  # the partition was revoked meanwhile: the new owner gets it again
        self.acked[partition].add(offset)
        q, done = self.outstanding[partition], self.acked[partition]
        moved = False
        while q and q[0] in done:
            done.discard(q[0])
            self.next_commit[partition] = q.popleft() + 1
            moved = True
        if moved:
            self.dirty.add(partition)

    def to_commit(self) -> dict[int, int]:
        """Offsets to commit since the last call (partition -> next offset to read)."""
        out = {p: self.next_commit[p] for p in self.dirty}
        self.dirty.clear()
        return out

    def forget(self, partitions: Sequence[int]) -> None:
        for p in partitions:
            for table in (self.outstanding, self.acked, self.next_commit):
                table.pop(p, None)
            self.dirty.discard(p)


def _bootstrap(endpoints: Any) -> str:
    return ",".join(f"{n.host}:{n.port}" for n in endpoints.nodes)


class KafkaSender(Sender):
    def __init__(self, driver: KafkaDriver):
        s: Settings = driver.settings
        self.topic = driver.topic
        self.timeout = s.send_timeout_s
        self.errors: list[Any] = []
        self.p = Producer(
            {
                "bootstrap.servers": _bootstrap(driver.endpoints),
                "acks": s.acks,
                "enable.idempotence": s.idempotence,
                "linger.ms": s.linger_ms,
                "message.timeout.ms": int(s.send_timeout_s * 1000),
            }
        )

    def _report(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(err)

    def send(self, batch: Sequence[bytes]) -> None:
        self.errors.clear()
        try:
            for m in batch:
                self.p.produce(self.topic, m, on_delivery=self._report)
        except (BufferError, KafkaException) as e:
            raise DriverError(f"kafka: produce failed: {e}") from e
        left = self.p.flush(self.timeout)
        if left or self.errors:
            raise DriverError(
                f"kafka: {left} messages unconfirmed after {self.timeout} s, "
                f"errors: {self.errors[:3]}"
            )

    def close(self) -> None:
        self.p.flush(self.timeout)


class KafkaReceiver(Receiver):
    """A group member; a helper thread polls while the worker does not, so rebalances never wait."""

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
        self.lock = threading.Lock()
        self.closing = threading.Event()
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
        """Serve group events (and prefetch a little) while the worker is busy elsewhere."""
        while not self.closing.is_set():
            if len(self.buffer) >= self.prefetch or not self.lock.acquire(timeout=0.05):
                self.closing.wait(0.02)
                continue
            try:
                self._poll(0.05)
            except DriverError as e:
                LOG.warning("%s", e)
            finally:
                self.lock.release()

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.owned |= {tp.partition for tp in partitions}
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

    def _poll(self, timeout_s: float) -> None:
        m = self.c.poll(timeout_s)
        if m is not None:
            self._keep(m)

    def _keep(self, m: Any) -> None:
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
            self._maybe_commit()
            while not self.buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._poll(min(left, 0.1))
            if self.buffer and len(self.buffer) < max_messages:
                for m in self.c.consume(max_messages - len(self.buffer), 0):
                    self._keep(m)
            out: list[Delivery] = []
            while self.buffer and len(out) < max_messages:
                m = self.buffer.popleft()
                self.tracker.delivered(m.partition(), m.offset())
                out.append(Delivery(m.value(), (m.partition(), m.offset()), False))
            return out

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
        tps = [TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())]
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

    def __init__(self, settings: Any, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        self.topic = queue
        self.group = f"{queue}-workers"

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
            config={"min.insync.replicas": str(s.min_insync_replicas)},
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


DRIVER = KafkaDriver
