"""RabbitMQ quorum queues (pika): a durable quorum queue, publisher confirms, manual acks.

- setup: a durable queue of type ``quorum`` with ``replicas`` members.
- send: publish every message of the batch (persistent; their frames written by the
  driver in one write, ``publishing.py``), then wait until the broker confirmed all of
  them (publisher confirms: a quorum of the queue's members has the message). A nack
  or a timeout fails the send. Confirms are matched to the batch by delivery tag: a
  late confirm or nack of an earlier (timed-out) batch never counts for or against the
  current one.
- receive: a consumer with ``basic_qos(prefetch)`` and manual acks; deliveries
  wait in a local buffer until ``receive`` hands them out, in the order the broker
  delivered them. The receiver reads its channel's deliveries off the wire itself
  (``deliveries.DeliveryReader``); pika handles every other frame.
- ack: one ``basic.ack`` (its frame written by the driver, ``publishing.py``) with
  ``multiple`` for the run of delivery tags that the call, with the tags acked before,
  fills from the channel's first (each of them handed out by ``receive`` and named by
  an ``ack``); a tag beyond a gap (a delivery not acked yet) is acked on its own. Every
  ack frame is written before ``ack`` returns.
  RabbitMQ has no visibility timeout: unacked deliveries come again (flagged
  redelivered by the broker) once the receiver's channel closes, so
  ``redelivery_timeout_s`` is 0.
- remaining: the queue's ``message_count`` from a passive queue.declare: ready
  messages only. Deliveries held unacked by open channels (a live receiver's
  prefetch) are not included, so call it after the receivers closed; the broker
  reports no in-flight count here (``in_flight`` is None) and AMQP cannot read a
  queue without consuming it (no identification).

Clients connect round-robin over the nodes (the others are fallbacks), each node tried
within ``connect_timeout_s``.

Node failures: a sender or receiver whose call fails (connection lost, channel closed,
no confirm in time, consumer cancelled by the broker) closes its connection and raises;
its next call connects again, to any node that answers, and (receiver) consumes anew.
Nothing is redeclared. A send that failed stays failed (the worker sends its messages
again under new seqs); unacked deliveries of the closed channel go back to the queue
and the broker delivers them again, flagged redelivered. Delivery tags are per channel,
so a delivery's handle names its channel too: an ack of a delivery from a closed
channel is dropped, never sent on the new channel (where its tag would name another
delivery), and the message comes again (at least once).
"""

from __future__ import annotations

import contextlib
import functools
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

from mqlab.brokers.base import Delivery, Driver, Receiver, Remaining, Sender
from mqlab.brokers.rabbitmq import publishing
from mqlab.brokers.rabbitmq.deliveries import Acks, DeliveryReader
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
    connect_timeout_s: float = spec(
        5.0, min=0.1, help="each node must accept a connection (TCP and AMQP) within this"
    )
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
    """A connection and a channel to the first node that answers (next in turn first)."""

    def __init__(self, driver: RabbitmqDriver):
        params = driver.params()
        try:
            self.conn = pika.BlockingConnection(params)
        except Exception as e:  # noqa: BLE001 - pika raises more than AMQPError here
            hosts = ", ".join(f"{p.host}:{p.port}" for p in params)
            raise DriverError(f"rabbitmq: cannot connect to {hosts}: {e!r}") from e
        try:
            self.ch = self.conn.channel()
        except Exception as e:  # noqa: BLE001
            self.close()
            raise DriverError(f"rabbitmq: cannot open a channel: {e!r}") from e

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


class RabbitmqSender(Sender):
    """Publishes with confirms on one channel; after a failed send the connection is
    dropped and the next send connects again (a new channel: delivery tags from 1)."""

    def __init__(self, driver: RabbitmqDriver):
        self.driver = driver
        self.queue = driver.queue
        self.timeout = driver.settings.confirm_timeout_s
        self.c: _Client | None = None
        self.confirms = _Confirms()
        self._connect()

    def _connect(self) -> _Client:
        c = _Client(self.driver)
        confirms = _Confirms()  # this channel's delivery tags

        def on_confirm(frame: Any) -> None:
            confirms.on_frame(frame)
            # frames taken from the underlying channel do not end process_data_events'
            # wait by themselves: a no-op callback does, so a batch returns as soon as it
            # is confirmed
            c.conn.add_callback_threadsafe(_noop)

        # Batch confirms: pika's BlockingChannel waits for each confirm in turn, so the
        # confirm frames are taken from the underlying channel and awaited once per batch.
        ready: list[bool] = []
        try:
            c.ch._impl.confirm_delivery(
                ack_nack_callback=on_confirm, callback=lambda _frame: ready.append(True)
            )
            deadline = time.monotonic() + self.driver.settings.connect_timeout_s
            while not ready:
                if time.monotonic() > deadline:
                    raise DriverError("rabbitmq: confirm.select not answered in time")
                c.conn.process_data_events(time_limit=0.1)
        except Exception as e:
            c.close()
            if isinstance(e, DriverError):
                raise
            raise DriverError(f"rabbitmq: cannot enable publisher confirms: {e!r}") from e
        self.c, self.confirms = c, confirms
        self.frames = publishing.PublishFrames(
            c.ch.channel_number, self.queue, c.conn._impl._body_max_length
        )
        return c

    def _drop(self) -> None:
        """Close the connection (a broken one, or one whose confirms are overdue)."""
        if self.c is not None:
            self.c.close()
            self.c = None

    def send(self, batch: Sequence[bytes]) -> None:
        c = self.c if self.c is not None else self._connect()
        conf = self.confirms
        conf.start_batch()
        try:
            if not (c.conn.is_open and c.ch.is_open):
                raise DriverError("rabbitmq: send failed: the channel is closed")
            # the batch's frames written at once, on pika's connection (publishing.py);
            # each message's tag counted first: its confirm may come while the batch is
            # still being written out
            data = self.frames.batch(batch)
            for _ in batch:
                conf.published()
            publishing.emit(c.conn._impl, data)  # the rest written as confirms are awaited
            deadline = time.monotonic() + self.timeout
            while not conf.all_confirmed():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DriverError(
                        f"rabbitmq: no publisher confirm within {self.timeout} s for "
                        f"{len(conf.pending)} of {len(batch)} messages (delivery tags "
                        f"{min(conf.pending)}..{max(conf.pending)})"
                    )
                c.conn.process_data_events(time_limit=min(left, 1.0))
        except DriverError:
            self._drop()
            raise
        except Exception as e:  # noqa: BLE001 - pika raises more than AMQPError on a lost node
            self._drop()
            raise DriverError(f"rabbitmq: send failed: {e!r}") from e
        if conf.nacked:
            raise DriverError(f"rabbitmq: broker nacked {conf.nacked} messages of the batch")

    def close(self) -> None:
        self._drop()


class RabbitmqReceiver(Receiver):
    """A consumer on one channel. A delivery's handle is (channel number, delivery tag),
    the channel number counting this receiver's connections. After a failed call (or a
    consumer cancelled by the broker) the connection is dropped, deliveries buffered from
    it are discarded (the broker delivers them again) and the next receive connects and
    consumes anew. ``ack`` drops, without sending, the acks of deliveries from an earlier
    (closed) channel: their tags mean nothing, or another delivery, on the new channel;
    those messages come again, flagged redelivered."""

    def __init__(self, driver: RabbitmqDriver):
        self.driver = driver
        self.buffer: deque[Delivery] = deque()
        self.c: _Client | None = None
        self.channel_no = 0
        self.cancelled = False
        self.acks = Acks()
        self._connect()

    def _connect(self) -> _Client:
        c = _Client(self.driver)
        no = self.channel_no + 1
        buffer: deque[Delivery] = deque()

        def on_delivery(body: bytes, tag: int, redelivered: bool) -> None:
            buffer.append(Delivery(body, (no, tag), redelivered))

        def on_message(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
            on_delivery(body, method.delivery_tag, bool(method.redelivered))  # pika's path

        def on_cancel(_frame: Any) -> None:
            if no == self.channel_no:
                self.cancelled = True

        try:
            c.ch.basic_qos(prefetch_count=self.driver.settings.prefetch)
            c.ch.add_on_cancel_callback(on_cancel)
            # a negative channel number ends process_data_events' wait (pika's own way)
            wake = functools.partial(c.conn._request_channel_dispatch, -c.ch.channel_number)
            DeliveryReader(c.conn._impl, c.ch.channel_number, on_delivery, wake)
            c.ch.basic_consume(self.driver.queue, on_message, auto_ack=False)
        except Exception as e:  # noqa: BLE001
            c.close()
            raise DriverError(f"rabbitmq: cannot consume from {self.driver.queue}: {e!r}") from e
        self.c, self.channel_no, self.cancelled = c, no, False
        self.buffer = buffer
        self.acks = Acks()  # this channel's delivery tags
        return c

    def _drop(self) -> None:
        """Close the connection; its unacked deliveries go back to the queue (and those
        read while it closed are discarded with the rest)."""
        if self.c is not None:
            self.c.close()
            self.c = None
        self.buffer.clear()

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        c = self.c if self.c is not None else self._connect()
        try:
            c.conn.process_data_events(time_limit=0)
            while not self.buffer and not self.cancelled:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                c.conn.process_data_events(time_limit=min(left, 1.0))
        except Exception as e:  # noqa: BLE001 - pika raises more than AMQPError on a lost node
            self._drop()
            raise DriverError(f"rabbitmq: receive failed: {e!r}") from e
        if self.cancelled and not self.buffer:
            self._drop()
            raise DriverError("rabbitmq: the broker cancelled the consumer")
        n = min(max_messages, len(self.buffer))
        return [self.buffer.popleft() for _ in range(n)]

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        c = self.c
        current = [
            d.handle[1] for d in deliveries if c is not None and d.handle[0] == self.channel_no
        ]
        if len(current) < len(deliveries):
            LOG.info(
                "rabbitmq: %d acks of a closed channel dropped (delivered again)",
                len(deliveries) - len(current),
            )
        if c is None or not current:
            return
        last, single = self.acks.plan(current)
        try:
            if not (c.conn.is_open and c.ch.is_open):
                raise DriverError("rabbitmq: ack failed: the channel is closed")
            data = publishing.ack_frames(c.ch.channel_number, last, single)
            if not publishing.emit(c.conn._impl, data):
                c.ch._flush_output()  # every ack frame written before ack returns
        except DriverError:
            self._drop()
            raise
        except Exception as e:  # noqa: BLE001
            self._drop()
            raise DriverError(f"rabbitmq: ack failed: {e!r}") from e

    def close(self) -> None:
        self._drop()


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
                connection_attempts=2,  # of the whole list
                retry_delay=0.5,
                socket_timeout=s.connect_timeout_s,
                stack_timeout=s.connect_timeout_s,
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
