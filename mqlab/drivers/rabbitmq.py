"""RabbitMQ quorum queues (pika): a durable quorum queue, publisher confirms, manual acks.

- setup: a durable queue of type ``quorum`` with ``replicas`` members.
- send: publish every message of the batch (persistent), then wait until the
  broker confirmed all of them (publisher confirms: a quorum of the queue's
  members has the message). A nack or a timeout fails the send. Confirms are
  matched to the batch by delivery tag: a late confirm or nack of an earlier
  (timed-out) batch never counts for or against the current one.
- receive: a consumer with ``basic_qos(prefetch)`` and manual acks; deliveries
  wait in a local buffer until ``receive`` hands them out.
- ack: ``basic_ack`` per delivery. RabbitMQ has no visibility timeout: unacked
  deliveries come again (flagged redelivered by the broker) once the receiver's
  channel closes, so ``redelivery_timeout_s`` is 0.
- remaining: the queue's ``message_count`` from a passive queue.declare: ready
  messages only. Deliveries held unacked by open channels (a live receiver's
  prefetch) are not included, so call it after the receivers closed; the broker
  reports no in-flight count here (``in_flight`` is None) and AMQP cannot read a
  queue without consuming it (no identification).

Clients connect round-robin over the nodes (the others are fallbacks).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
from pika import spec as amqp

from mqlab.drivers.base import Delivery, Driver, Receiver, Remaining, Sender
from mqlab.errors import DriverError
from mqlab.typed import spec

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    replicas: int = spec(
        3, min=1, max=15, help="quorum queue members (x-quorum-initial-group-size)"
    )
    prefetch: int = spec(100, min=1, max=65_535, help="basic_qos prefetch count per receiver")
    confirm_timeout_s: float = spec(
        30.0, min=0.1, help="publisher confirms must arrive within this"
    )
    heartbeat_s: int = spec(30, min=0)
    username: str = "guest"
    password_env: str = spec(
        "MQLAB_RABBITMQ_PASSWORD", help="environment variable with the password (unset: guest)"
    )
    vhost: str = "/"


class _Confirms:
    """Publisher confirms of the batch being sent. Delivery tags run 1, 2, ... per channel;
    an ack or nack covers one tag, or with ``multiple`` every tag up to it. Only tags of the
    current batch count: confirms of an earlier batch (one that timed out) are ignored."""

    def __init__(self) -> None:
        self.next_tag = 1  # the tag the broker gives the next published message
        self.low = 1  # tags of the current batch below this are confirmed
        self.pending: set[int] = set()  # unconfirmed tags of the current batch
        self.nacked = 0  # nacked messages of the current batch

    def start_batch(self) -> None:
        self.low = self.next_tag
        self.pending.clear()
        self.nacked = 0

    def published(self) -> None:
        self.pending.add(self.next_tag)
        self.next_tag += 1

    def on_frame(self, frame: Any) -> None:
        method = frame.method
        tag, multiple = method.delivery_tag, method.multiple
        if multiple:
            covered = [t for t in range(self.low, tag + 1) if t in self.pending]
            self.low = max(self.low, tag + 1)
        else:
            covered = [tag] if tag in self.pending else []
        self.pending.difference_update(covered)
        if isinstance(method, amqp.Basic.Nack):
            self.nacked += len(covered)
            if not covered:
                LOG.warning("rabbitmq: late nack of an earlier batch (tag %d)", tag)

    def all_confirmed(self) -> bool:
        return not self.pending


class _Client:
    def __init__(self, driver: RabbitmqDriver):
        params = driver.params()
        try:
            self.conn = pika.BlockingConnection(params)
            self.ch = self.conn.channel()
        except pika.exceptions.AMQPError as e:
            hosts = ", ".join(f"{p.host}:{p.port}" for p in params)
            raise DriverError(f"rabbitmq: cannot connect to {hosts}: {e!r}") from e

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


class RabbitmqSender(Sender):
    def __init__(self, driver: RabbitmqDriver):
        self.c = _Client(driver)
        self.queue = driver.queue
        self.timeout = driver.settings.confirm_timeout_s
        self.confirms = _Confirms()
        self.props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
        # Batch confirms: pika's BlockingChannel waits for each confirm in turn, so the
        # confirm frames are taken from the underlying channel and awaited once per batch.
        ready: list[bool] = []
        impl = self.c.ch._impl
        impl.confirm_delivery(
            ack_nack_callback=self._on_confirm, callback=lambda _frame: ready.append(True)
        )
        while not ready:
            self.c.conn.process_data_events(time_limit=0.1)

    def _on_confirm(self, frame: Any) -> None:
        self.confirms.on_frame(frame)
        # frames taken from the underlying channel do not end process_data_events' wait by
        # themselves: a no-op callback does, so a batch returns as soon as it is confirmed
        self.c.conn.add_callback_threadsafe(_noop)

    def send(self, batch: Sequence[bytes]) -> None:
        conf = self.confirms
        conf.start_batch()
        try:
            for m in batch:
                conf.published()  # before publishing: its confirm may come during the next one
                self.c.ch.basic_publish("", self.queue, m, self.props)
            deadline = time.monotonic() + self.timeout
            while not conf.all_confirmed():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DriverError(
                        f"rabbitmq: no publisher confirm within {self.timeout} s for "
                        f"{len(conf.pending)} of {len(batch)} messages (delivery tags "
                        f"{min(conf.pending)}..{max(conf.pending)})"
                    )
                self.c.conn.process_data_events(time_limit=min(left, 1.0))
        except pika.exceptions.AMQPError as e:
            raise DriverError(f"rabbitmq: send failed: {e!r}") from e
        if conf.nacked:
            raise DriverError(f"rabbitmq: broker nacked {conf.nacked} messages of the batch")

    def close(self) -> None:
        self.c.close()


class RabbitmqReceiver(Receiver):
    def __init__(self, driver: RabbitmqDriver):
        self.c = _Client(driver)
        self.buffer: deque[Delivery] = deque()
        self.c.ch.basic_qos(prefetch_count=driver.settings.prefetch)
        self.c.ch.basic_consume(driver.queue, self._on_message, auto_ack=False)

    def _on_message(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        self.buffer.append(Delivery(body, method.delivery_tag, bool(method.redelivered)))

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        try:
            self.c.conn.process_data_events(time_limit=0)
            while not self.buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.c.conn.process_data_events(time_limit=min(left, 1.0))
        except pika.exceptions.AMQPError as e:
            raise DriverError(f"rabbitmq: receive failed: {e!r}") from e
        n = min(max_messages, len(self.buffer))
        return [self.buffer.popleft() for _ in range(n)]

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        try:
            for d in deliveries:
                self.c.ch.basic_ack(d.handle)
        except pika.exceptions.AMQPError as e:
            raise DriverError(f"rabbitmq: ack failed: {e!r}") from e

    def close(self) -> None:
        self.c.close()


class RabbitmqDriver(Driver):
    name = "rabbitmq"
    Settings = Settings
    client_libraries = ("pika",)

    def __init__(self, settings: Any, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        self._rotation = itertools.count()

    def params(self, first: int | None = None) -> list[pika.ConnectionParameters]:
        """All nodes, starting at the next one in turn (the rest are fallbacks)."""
        s: Settings = self.settings
        nodes = list(self.endpoints.nodes)
        start = (next(self._rotation) if first is None else first) % len(nodes)
        creds = pika.PlainCredentials(s.username, os.environ.get(s.password_env, "guest"))
        return [
            pika.ConnectionParameters(
                n.host,
                n.port,
                s.vhost,
                creds,
                heartbeat=s.heartbeat_s,
                blocked_connection_timeout=s.confirm_timeout_s,
                connection_attempts=2,
                retry_delay=0.5,
            )
            for n in nodes[start:] + nodes[:start]
        ]

    def setup(self) -> None:
        c = _Client(self)
        try:
            c.ch.queue_declare(
                self.queue,
                durable=True,
                arguments={
                    "x-queue-type": "quorum",
                    "x-quorum-initial-group-size": self.settings.replicas,
                },
            )
        except pika.exceptions.AMQPError as e:
            raise DriverError(f"rabbitmq: cannot declare quorum queue {self.queue}: {e!r}") from e
        finally:
            c.close()

    @property
    def redelivery_timeout_s(self) -> float:
        return 0.0  # no visibility timeout: only a closed channel returns its deliveries

    def remaining(self, identify: bool = False) -> Remaining:
        """Ready messages (passive queue.declare); unacked deliveries of open channels are
        not included, ``in_flight`` is None, and nothing is identified."""
        c = _Client(self)
        try:
            ok = c.ch.queue_declare(self.queue, passive=True)
        except pika.exceptions.AMQPError as e:
            raise DriverError(f"rabbitmq: cannot read queue {self.queue}: {e!r}") from e
        finally:
            c.close()
        return Remaining(int(ok.method.message_count))

    def teardown(self) -> None:
        c = _Client(self)
        try:
            c.ch.queue_delete(self.queue)
        except pika.exceptions.AMQPError as e:
            LOG.debug("rabbitmq: delete %s: %r", self.queue, e)
        finally:
            c.close()

    def sender(self) -> Sender:
        return RabbitmqSender(self)

    def receiver(self) -> Receiver:
        return RabbitmqReceiver(self)

    def server_versions(self) -> list[str]:
        versions = []
        for i in range(len(self.endpoints.nodes)):
            try:
                conn = pika.BlockingConnection(self.params(first=i)[0])
            except pika.exceptions.AMQPError:  # a node may be down; report what answers
                LOG.debug("no version from node %d", i)
                continue
            props = conn._impl.server_properties  # what the server announced at connect
            conn.close()
            product = props.get("product", b"RabbitMQ")
            version = props.get("version", b"?")
            versions.append(f"{_text(product)} {_text(version)}")
        return versions


def _noop() -> None:
    pass


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


DRIVER = RabbitmqDriver
