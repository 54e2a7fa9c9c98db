"""NATS JetStream: a work-queue stream with N replicas, file storage, one durable pull consumer.

- send: publish every message of the batch asynchronously, then wait for all
  PubAcks (a PubAck means the stream's quorum stored it). A message no JetStream
  server took (status 503, "no responders": the stream's interest has not reached the
  server this client is connected to yet, or the stream is between leaders) was not
  stored; it is published again after ``NO_RESPONDERS_WAIT_S``, within
  ``publish_timeout_s`` (as nats.go's JetStream publish does).
- receive (``prefetch`` > 0, the default): each receiver keeps standing pull requests
  on the shared durable consumer (explicit acks) so that up to ``prefetch`` messages
  (at least the receive batch) are delivered ahead of ``receive``, which hands them out
  from that local buffer. A request asks for what the buffer lacks once it is half
  empty and lasts ``PULL_EXPIRES_S``; an arriving message is handed out at once.
  Delivered messages are hidden from other receivers like handed-out ones (the
  server's ``ack_wait_s`` runs from delivery), so one held longer than half of
  ``ack_wait_s`` is not handed out but nak'ed (delivered again at once, to any
  receiver), and ``close`` naks the ones never handed out.
- ack (``prefetch`` > 0): ``ack`` returning means the acks were handed to nats-py in
  the order of ``deliveries`` and nats-py's flusher was given a turn of the event loop
  to write them (it writes all it holds at once; a connection being re-established
  keeps them in nats-py's buffer and writes them once reconnected). It does not wait
  for the server. With ``ack_sync`` every ack asks the server for a confirmation
  (JetStream's double ack): at most ``CONFIRMS_AWAITED_MAX`` confirmations are awaited
  at a time (``ack`` waits beyond that); one not come after ``publish_timeout_s`` is
  logged. ``close`` returns once the server has received every ack and nak (a
  PING/PONG after them) and, with ``ack_sync``, confirmed every ack (or
  ``publish_timeout_s`` passed, logged). An ack lost with a connection means its
  message comes again (at least once). A delivery this receiver did not hand out, or
  acked already, is not acked (``DriverError``, after acking the others): a message
  still held cannot be acked.
- ``prefetch = 0`` is the behaviour before prefetch: each ``receive`` is one ``fetch``
  of at most its batch, and ``ack`` waits until the server confirmed every ack
  (``ack_sync``) or flushes them (a PING/PONG).
- redelivery: a delivery is flagged redelivered when the server says it was
  delivered before (``num_delivered > 1``), also when the receiver it went to first
  never handed it out; ``redelivery_timeout_s`` is ``ack_wait_s``.
- remaining: the stream's message count (a work-queue stream removes a message
  when it is acked, so this is ready plus unacked); ``in_flight`` is the consumer's
  ``num_ack_pending`` (including what open receivers hold fetched ahead). ``identify``
  reads the stored messages by sequence number (STREAM.MSG.GET with next_by_subj, which
  never consumes), in up to 64 concurrent walks over the sequence range, so its cost
  follows the messages, not the range.

nats-py is asyncio; each sender/receiver owns an event loop driven from its
worker thread, so there are no cross-thread hops on the hot path. The loop runs
only inside the driver's calls: what arrives meanwhile waits in the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import (
    IDENTIFY_PREFIX_BYTES,
    Driver,
    Receiver,
    Remaining,
    Sender,
)
from mqlab.brokers.nats.client import Client, NatsLink, NatsSettings, close_loop
from mqlab.brokers.nats.lane import LaneConn
from mqlab.brokers.nats.receiver import NatsFetchReceiver, NatsReceiver
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)
IDENTIFY_WALKS = 64  # concurrent walks over the stream's sequence range in remaining()
SETUP_WAIT_S = 30.0  # how long setup asks a cluster that does not answer JetStream yet


NO_RESPONDERS_WAIT_S = 0.25  # before publishing again what no server took (nats.go's default)
_sendpath: Any = compiled.module  # None where the install did not build it
# mqlab._sendpath.Lanes' outcomes (mqlab/_sendpath.c)
ST_OK, ST_REPLY_ERROR, ST_TIMEOUT, ST_NO_RESPONDERS = 0, 1, 2, 6


class NatsSender(Sender):
    def __init__(self, driver: NatsLink):
        self.link = driver
        self.subject = driver.subject
        self.timeout = driver.settings.publish_timeout_s
        self.republished = 0  # messages published again after no server took them
        # nats-py's client for send(); where the sender goes in lanes, made only if asked
        self.c: Client | None = Client(driver) if self.lane_proto is None else None
        self.lane = LaneConn(
            driver.endpoints, driver.settings.connect_timeout_s, f"mqlab-{driver.queue}"
        )
        self.lane_spec: tuple[Any, ...] | None = None  # a lane's run spec, for lane_pool
        self.lane_pool: envelope.PayloadPool | None = None

    async def _send(self, batch: Sequence[bytes]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        pending = list(batch)
        assert self.c is not None
        while True:
            futures = [await self.c.js.publish_async(self.subject, m) for m in pending]
            left = max(0.001, deadline - loop.time())
            results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), left)
            again = []
            for m, ack in zip(pending, results, strict=True):
                if isinstance(ack, nats.js.errors.NoStreamResponseError):
                    again.append(m)  # no server took it (status 503): nothing was stored
                elif isinstance(ack, BaseException):
                    raise ack
                elif ack is None or getattr(ack, "stream", None) is None:
                    raise DriverError(f"nats: bad PubAck {ack!r}")
            if not again:
                return
            if loop.time() + NO_RESPONDERS_WAIT_S > deadline:
                raise DriverError(
                    f"nats: no JetStream server took {len(again)} of {len(batch)} messages on "
                    f"{self.subject} within publish_timeout_s = {self.timeout:g} s (no responders)"
                )
            self.republished += len(again)
            LOG.info("nats: no responders for %d messages; publishing them again", len(again))
            await asyncio.sleep(NO_RESPONDERS_WAIT_S)
            pending = again

    def send(self, batch: Sequence[bytes]) -> None:
        if self.c is None:
            self.c = Client(self.link)
        self.c.run(self._send(batch))

    # -- lanes (mqlab._sendpath.Lanes, PROTO_NATS): each batch its PUBs with a reply
    # subject per message on the sender's own connection (mqlab.brokers.nats.lane), done
    # once every message's PubAck came; what no server took (503) goes again after
    # NO_RESPONDERS_WAIT_S within publish_timeout_s, as above; a batch with no reply
    # within publish_timeout_s fails and its connection is dropped (the next connects) --
    lane_proto = _sendpath.NATS if _sendpath is not None else None

    def lane_timeout_ns(self) -> int:
        return int(self.timeout * 1e9)

    def lane_connected(self) -> bool:
        return self.lane.sock is not None

    def lane_connect(self) -> None:
        self.lane.connect()

    def lane_args(
        self, sender: int, pool: envelope.PayloadPool
    ) -> tuple[int, tuple[Any, ...], int, int]:
        if self.lane.sock is None:
            raise DriverError("nats: send failed: not connected")
        if self.lane_spec is None or self.lane_spec[6] != sender or self.lane_pool is not pool:
            self.lane_pool = pool
            self.lane_spec = (
                self.subject.encode(),
                b"",  # the connection's inbox, below
                b"".join(pool._pads),
                len(pool._pads),
                envelope.MAGIC,
                envelope.VERSION,
                sender,
                int(NO_RESPONDERS_WAIT_S * 1e9),
            )
        if self.lane_spec[1] != self.lane.inbox:
            self.lane_spec = (self.lane_spec[0], self.lane.inbox, *self.lane_spec[2:])
        return self.lane.fd, self.lane_spec, 0, self.lane.generation

    def lane_outcome(self, status: int, integer: int, message: str | None) -> Exception | None:
        if status == ST_OK:
            return None
        if status == ST_REPLY_ERROR:  # the connection is in step: it goes on
            return DriverError(f"nats: send failed: {message}")
        if status == ST_NO_RESPONDERS:
            return DriverError(
                f"nats: no JetStream server took {integer} messages of a batch on "
                f"{self.subject} within publish_timeout_s = {self.timeout:g} s (no responders)"
            )
        self.lane.close()  # a timeout, a lost connection, a reply out of step: connect again
        if status == ST_TIMEOUT:
            why = f"no reply within publish_timeout_s = {self.timeout:g} s"
        else:
            why = message or "the connection failed"
        return DriverError(f"nats: send failed: {why}")

    def close(self) -> None:
        self.lane.close()
        if self.c is not None:
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
        c = Client(self)
        try:
            return c.run(coro_fn(c))
        finally:
            c.close()

    def setup(self) -> None:
        s: NatsSettings = self.settings

        async def go(c: Client) -> None:
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

        self._admin_patiently(go, f"cannot create stream {self.stream}")  # idempotent steps

    def _admin_patiently(self, coro_fn: Any, failing: str) -> Any:
        """:meth:`_admin`, asked again until SETUP_WAIT_S while JetStream's API gives no
        answer: a cluster just started, between meta leaders after a fault, or a stream
        electing its leader does not answer at all. Then, or on an API error, a one-line
        DriverError (``failing``: what could not be done)."""
        deadline = time.monotonic() + SETUP_WAIT_S
        while True:
            try:
                return self._admin(coro_fn)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as e:
                if time.monotonic() > deadline:
                    raise DriverError(
                        f"nats: {failing}: JetStream did not answer within "
                        f"{SETUP_WAIT_S:.0f} s ({type(e).__name__})"
                    ) from e
                LOG.info("nats: JetStream did not answer yet (%s); asking again", failing)
            except nats.js.errors.APIError as e:
                raise DriverError(f"nats: {failing}: {e}") from e

    def teardown(self) -> None:
        async def go(c: Client) -> None:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await c.js.delete_stream(self.stream)

        self._admin(go)

    def stream_replicas(self) -> dict[str, Any]:
        """Leader and replicas of the stream, as the cluster reports them."""

        async def go(c: Client) -> dict[str, Any]:
            info = await c.js.stream_info(self.stream)
            cl = info.cluster
            return {
                "leader": cl.leader if cl else None,
                "replicas": [r.name for r in (cl.replicas or [])] if cl else [],
                "messages": info.state.messages,
            }

        result: dict[str, Any] = self._admin_patiently(
            go, f"cannot tell stream {self.stream}'s leader"
        )
        return result

    @property
    def redelivery_timeout_s(self) -> float:
        return float(self.settings.ack_wait_s)

    def remaining(self, identify: bool = False) -> Remaining:
        """Messages in the stream (ready + unacked); ``in_flight``: the consumer's ack pending."""

        async def go(c: Client) -> Remaining:
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

    async def _stored(self, c: Client, first: int, last: int) -> list[bytes]:
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

    def sends_in_lanes(self) -> bool:
        return compiled.module is not None

    def sender(self) -> Sender:
        return NatsSender(self)

    def receiver(self) -> Receiver:
        if self.settings.prefetch == 0:
            return NatsFetchReceiver(self)
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
                close_loop(loop)
        return versions


DRIVER = NatsDriver

Settings = NatsSettings  # the profile [settings] schema, by its conventional name
