"""NATS JetStream: a work-queue stream with N replicas, file storage, one durable pull consumer.

- send: publish every message of the batch asynchronously, then wait for all
  PubAcks (a PubAck means the stream's quorum stored it).
- receive: ``fetch`` from the shared durable pull consumer (explicit acks);
  unacked messages are redelivered after ``ack_wait_s``.
- ack: ``ack_sync`` (waits for the server) or fire-and-forget ``ack``, per profile.
- redelivery: a delivery is flagged redelivered when the server says it was
  delivered before (``num_delivered > 1``); ``redelivery_timeout_s`` is ``ack_wait_s``.
- remaining: the stream's message count (a work-queue stream removes a message
  when it is acked, so this is ready plus unacked); ``in_flight`` is the consumer's
  ``num_ack_pending``. ``identify`` reads the stored messages by sequence number
  (STREAM.MSG.GET with next_by_subj, which never consumes), in up to 64 concurrent
  walks over the sequence range, so its cost follows the messages, not the range.

nats-py is asyncio; each sender/receiver owns an event loop driven from its
worker thread, so there are no cross-thread hops on the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from mqlab.drivers.base import IDENTIFY_PREFIX_BYTES, Delivery, Driver, Receiver, Remaining, Sender
from mqlab.errors import DriverError
from mqlab.typed import spec

LOG = logging.getLogger(__name__)
IDENTIFY_WALKS = 64  # concurrent walks over the stream's sequence range in remaining()


@dataclass(frozen=True)
class NatsSettings:
    replicas: int = spec(3, min=1, max=5)
    storage: str = spec("file", choices=("file", "memory"))
    ack_wait_s: float = spec(30.0, min=0.5, help="visibility timeout before redelivery")
    ack_sync: bool = spec(True, help="wait for the server to confirm each ack")
    max_ack_pending: int = spec(100_000, min=1)
    publish_timeout_s: float = spec(10.0, min=0.1)
    connect_timeout_s: float = spec(5.0, min=0.1)


def _servers(endpoints: Any) -> list[str]:
    return [f"nats://{n.host}:{n.port}" for n in endpoints.nodes]


class _Client:
    def __init__(self, driver: NatsDriver):
        self.driver = driver
        self.loop = asyncio.new_event_loop()
        s = driver.settings
        try:
            self.nc = self.run(
                nats.connect(
                    servers=_servers(driver.endpoints),
                    connect_timeout=s.connect_timeout_s,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.2,
                    allow_reconnect=True,
                    name=f"mqlab-{driver.queue}",
                )
            )
        except Exception as e:
            _close_loop(self.loop)
            raise DriverError(
                f"nats: cannot connect to {', '.join(_servers(driver.endpoints))}: {e}"
            ) from e
        self.js = self.nc.jetstream(timeout=s.publish_timeout_s)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.nc.close())
        _close_loop(self.loop)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the client's leftover background tasks, then close the loop quietly."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    with contextlib.suppress(Exception):
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


class NatsSender(Sender):
    def __init__(self, driver: NatsDriver):
        self.c = _Client(driver)
        self.subject = driver.subject
        self.timeout = driver.settings.publish_timeout_s

    async def _send(self, batch: Sequence[bytes]) -> None:
        futures = [await self.c.js.publish_async(self.subject, m) for m in batch]
        acks = await asyncio.wait_for(asyncio.gather(*futures), self.timeout)
        for ack in acks:
            if ack is None or getattr(ack, "stream", None) is None:
                raise DriverError(f"nats: bad PubAck {ack!r}")

    def send(self, batch: Sequence[bytes]) -> None:
        self.c.run(self._send(batch))

    def close(self) -> None:
        self.c.close()


class NatsReceiver(Receiver):
    def __init__(self, driver: NatsDriver):
        self.c = _Client(driver)
        self.ack_sync = driver.settings.ack_sync
        self.sub = self.c.run(
            self.c.js.pull_subscribe_bind(durable=driver.consumer, stream=driver.stream)
        )

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        try:
            msgs = self.c.run(self.sub.fetch(batch=max_messages, timeout=max(timeout_s, 0.01)))
        except (TimeoutError, nats.errors.TimeoutError):
            return []
        return [Delivery(m.data, m, m.metadata.num_delivered > 1) for m in msgs]

    async def _ack(self, deliveries: Sequence[Delivery]) -> None:
        if self.ack_sync:
            await asyncio.gather(*(d.handle.ack_sync() for d in deliveries))
        else:
            for d in deliveries:
                await d.handle.ack()
            await self.c.nc.flush()

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        self.c.run(self._ack(deliveries))

    def close(self) -> None:
        self.c.close()


class NatsDriver(Driver):
    name = "nats"
    Settings = NatsSettings
    client_libraries = ("nats-py",)
    identifies_remaining = True

    def __init__(self, settings: NatsSettings, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        self.stream = queue.replace(".", "_")
        self.subject = f"{self.stream}.q"
        self.consumer = f"{self.stream}_workers"

    def _admin(self, coro_fn: Any) -> Any:
        c = _Client(self)
        try:
            return c.run(coro_fn(c))
        finally:
            c.close()

    def setup(self) -> None:
        s: NatsSettings = self.settings

        async def go(c: _Client) -> None:
            cfg = api.StreamConfig(
                name=self.stream,
                subjects=[self.subject],
                num_replicas=s.replicas,
                storage=api.StorageType.FILE if s.storage == "file" else api.StorageType.MEMORY,
                retention=api.RetentionPolicy.WORK_QUEUE,
            )
            try:
                await c.js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                await c.js.add_stream(cfg)
            await c.js.add_consumer(
                self.stream,
                api.ConsumerConfig(
                    durable_name=self.consumer,
                    ack_policy=api.AckPolicy.EXPLICIT,
                    ack_wait=s.ack_wait_s,
                    max_ack_pending=s.max_ack_pending,
                    max_waiting=4096,
                    deliver_policy=api.DeliverPolicy.ALL,
                ),
            )

        try:
            self._admin(go)
        except nats.js.errors.APIError as e:
            raise DriverError(f"nats: cannot create stream {self.stream}: {e}") from e

    def teardown(self) -> None:
        async def go(c: _Client) -> None:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await c.js.delete_stream(self.stream)

        self._admin(go)

    def stream_replicas(self) -> dict[str, Any]:
        """Leader and replicas of the stream, as the cluster reports them."""

        async def go(c: _Client) -> dict[str, Any]:
            info = await c.js.stream_info(self.stream)
            cl = info.cluster
            return {
                "leader": cl.leader if cl else None,
                "replicas": [r.name for r in (cl.replicas or [])] if cl else [],
                "messages": info.state.messages,
            }

        result: dict[str, Any] = self._admin(go)
        return result

    @property
    def redelivery_timeout_s(self) -> float:
        return float(self.settings.ack_wait_s)

    def remaining(self, identify: bool = False) -> Remaining:
        """Messages in the stream (ready + unacked); ``in_flight``: the consumer's ack pending."""

        async def go(c: _Client) -> Remaining:
            state = (await c.js.stream_info(self.stream)).state
            try:
                in_flight: int | None = (
                    await c.js.consumer_info(self.stream, self.consumer)
                ).num_ack_pending
            except nats.js.errors.NotFoundError:
                in_flight = None
            payloads = None
            if identify:
                payloads = await self._stored(c, state.first_seq, state.last_seq)
            return Remaining(state.messages, payloads, in_flight)

        try:
            result: Remaining = self._admin(go)
        except nats.errors.Error as e:
            raise DriverError(f"nats: cannot read the state of stream {self.stream}: {e}") from e
        return result

    async def _stored(self, c: _Client, first: int, last: int) -> list[bytes]:
        """Headers of the stored messages first..last (deleted ones skipped), in order."""
        cap = self.identify_cap
        span = max(0, last - first + 1)
        walks = min(IDENTIFY_WALKS, span)
        bounds = [first + span * i // walks for i in range(walks + 1)] if walks else []
        found: list[list[bytes]] = [[] for _ in range(walks)]
        total = [0]

        async def walk(i: int) -> None:
            seq, end = bounds[i], bounds[i + 1] - 1
            while seq <= end and total[0] < cap:
                try:
                    m = await c.js.get_msg(self.stream, seq=seq, subject=self.subject, next=True)
                except nats.js.errors.NotFoundError:
                    return  # nothing stored from seq on
                if m.seq is None or m.seq > end:
                    return
                found[i].append(bytes(m.data or b"")[:IDENTIFY_PREFIX_BYTES])
                total[0] += 1
                seq = m.seq + 1

        await asyncio.gather(*(walk(i) for i in range(walks)))
        return [p for part in found for p in part][:cap]

    def sender(self) -> Sender:
        return NatsSender(self)

    def receiver(self) -> Receiver:
        return NatsReceiver(self)

    def server_versions(self) -> list[str]:
        versions = []
        for node in self.endpoints.nodes:

            async def one(url: str = f"nats://{node.host}:{node.port}") -> str:
                nc = await nats.connect(
                    servers=[url],
                    connect_timeout=2,
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                )
                try:
                    return f"nats-server {nc._server_info.get('version', '?')}"
                finally:
                    await nc.close()

            loop = asyncio.new_event_loop()
            try:
                versions.append(loop.run_until_complete(one()))
            except Exception:  # a node may be down; report what answers
                LOG.debug("no version from %s:%s", node.host, node.port)
            finally:
                _close_loop(loop)
        return versions


DRIVER = NatsDriver

Settings = NatsSettings  # the profile [settings] schema, by its conventional name
