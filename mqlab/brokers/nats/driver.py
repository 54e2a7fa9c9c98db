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
import itertools
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from mqlab.brokers.base import (
    IDENTIFY_PREFIX_BYTES,
    Delivery,
    Driver,
    Receiver,
    Remaining,
    Sender,
)
from mqlab.brokers.held import Held
from mqlab.errors import DriverError
from mqlab.typed import spec

LOG = logging.getLogger(__name__)
IDENTIFY_WALKS = 64  # concurrent walks over the stream's sequence range in remaining()
SETUP_WAIT_S = 30.0  # how long setup asks a cluster that does not answer JetStream yet
PULL_EXPIRES_S = 2.0  # how long a standing pull request waits on the server
PULL_GRACE_S = 0.5  # ...and how much longer before the receiver gives up on hearing its end
HOLD_FRACTION = 0.5  # a fetched message held longer than this part of ack_wait_s is nak'ed
NO_RESPONDERS_WAIT_S = 0.25  # before publishing again what no server took (nats.go's default)
CONFIRMS_AWAITED_MAX = 1024  # ack_sync: acks awaiting their confirmation before ack() waits


@dataclass(frozen=True)
class NatsSettings:
    replicas: int = spec(3, min=1, max=5)
    storage: str = spec("file", choices=("file", "memory"))
    ack_wait_s: float = spec(30.0, min=0.5, help="visibility timeout before redelivery")
    ack_sync: bool = spec(
        True,
        help="the server confirms each ack (double ack); with prefetch 0 ack() waits for it, "
        "else up to 1024 confirmations are awaited at a time, and close() waits for all",
    )
    max_ack_pending: int = spec(100_000, min=1)
    prefetch: int = spec(
        256,
        min=0,
        max=65_536,
        help="messages per receiver delivered ahead of receive() into a local buffer "
        "(standing pull requests; at least the receive batch); 0: one fetch per receive() "
        "and ack() waits, the behaviour before prefetch",
    )
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
        self.republished = 0  # messages published again after no server took them

    async def _send(self, batch: Sequence[bytes]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        pending = list(batch)
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
        self.c.run(self._send(batch))

    def close(self) -> None:
        self.c.close()


class Credit:
    """How many messages the live pull requests of one receiver may still bring.

    The server hands a consumer's messages to its waiting requests in an order of its
    own, so only the total is tracked: each message lowers it (none due: every request
    is satisfied); a request's end (status 408 when it expired, 409 when the server cut
    it short, with the count it still lacked in ``Nats-Pending-Messages``) removes what
    was still due on it. A request whose end is not heard of (satisfied, or dropped with
    a connection) is given up on after its deadline; what is due is then at most what
    the requests still live asked for (a few more messages than asked for may come)."""

    def __init__(self) -> None:
        self.live: dict[str, tuple[int, float]] = {}  # reply subject -> (batch, deadline)
        self.due = 0

    def asked(self, reply: str, batch: int, deadline: float) -> None:
        self.live[reply] = (batch, deadline)
        self.due += batch

    def arrived(self) -> None:
        self.due = max(0, self.due - 1)
        if not self.due:
            self.live.clear()

    def _at_most_asked(self) -> None:
        self.due = min(self.due, sum(batch for batch, _ in self.live.values()))

    def ended(self, reply: str, pending: int | None) -> None:
        if self.live.pop(reply, None) is None:
            return  # a request given up on already
        if pending is not None:
            self.due = max(0, self.due - pending)
        self._at_most_asked()

    def expire(self, now: float) -> None:
        late = [reply for reply, (_, deadline) in self.live.items() if deadline < now]
        for reply in late:
            del self.live[reply]
        if late:
            self._at_most_asked()

    def wanted(self, held: int, capacity: int) -> int:
        """The batch of the next request: none until held and due are half the capacity."""
        if held + self.due > capacity // 2:
            return 0
        return capacity - held - self.due


class NatsReceiver(Receiver):
    """Standing pull requests fill a local buffer ahead of ``receive`` (module docstring).

    Messages come to one wildcard inbox, each pull request with its own reply subject
    under it (so its end status is known by subject); ack confirmations come to another.
    The event loop runs only when there is something to send or nothing to hand out: a
    ``receive`` served from the buffer with nothing due makes no system call."""

    def __init__(self, driver: NatsDriver):
        s: NatsSettings = driver.settings
        self.c = _Client(driver)
        nc = self.c.nc
        self.prefetch = s.prefetch
        self.ack_sync = s.ack_sync
        self.ack_timeout_s = s.publish_timeout_s
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{driver.stream}.{driver.consumer}"
        self.held = Held(s.ack_wait_s * HOLD_FRACTION, key=lambda d: d.handle.reply)
        self.credit = Credit()
        self.pull_prefix = nc.new_inbox()
        self.ack_prefix = nc.new_inbox()
        self.numbers = itertools.count()
        self.unconfirmed: dict[str, float] = {}  # ack reply subject -> sent (monotonic s)
        self.overdue = 0  # acks whose confirmation never came
        self.failure: str | None = None  # a pull request's error status, raised by receive
        self.reconnects = nc.stats["reconnects"]
        self.arrived = asyncio.Event()  # a message or a request's end came
        self.confirmed = asyncio.Event()  # an ack confirmation came
        try:
            self.pulls = self.c.run(nc.subscribe(f"{self.pull_prefix}.*", cb=self._on_pull))
            if self.ack_sync:
                self.c.run(nc.subscribe(f"{self.ack_prefix}.*", cb=self._on_confirm))
        except Exception as e:
            self.c.close()
            raise DriverError(f"nats: cannot subscribe the receiver's inboxes: {e}") from e

    async def _on_pull(self, msg: Any) -> None:
        status = msg.headers.get(api.Header.STATUS) if msg.headers else None
        if not status:
            self.credit.arrived()
            self.held.add(
                [Delivery(msg.data, msg, msg.metadata.num_delivered > 1)], time.monotonic()
            )
        elif status != api.StatusCode.CONTROL_MESSAGE:  # heartbeats are not asked for
            pending = msg.headers.get("Nats-Pending-Messages")
            self.credit.ended(msg.subject, int(pending) if pending is not None else None)
            if status not in (
                api.StatusCode.REQUEST_TIMEOUT,  # 408: expired
                api.StatusCode.CONFLICT,  # 409: cut short (leader change, limits)
                api.StatusCode.NO_MESSAGES,
            ):
                if status == api.StatusCode.SERVICE_UNAVAILABLE:
                    description = "no responders (the consumer has no leader, or is gone)"
                else:
                    lines = msg.headers.get(api.Header.DESCRIPTION, "").strip().splitlines()
                    description = lines[0] if lines else ""
                self.failure = f"pull request answered {status} {description}".strip()
        self.arrived.set()

    async def _on_confirm(self, msg: Any) -> None:
        self.unconfirmed.pop(msg.subject, None)
        self.confirmed.set()

    def _wanted(self, max_messages: int, now: float) -> int:
        """The batch to ask for now (0: none), once requests of a lost connection and
        overdue ones are given up on."""
        reconnects = self.c.nc.stats["reconnects"]
        if reconnects != self.reconnects:  # requests of the lost connection may be gone
            self.reconnects = reconnects
            self.credit.expire(float("inf"))
        self.credit.expire(now)
        return self.credit.wanted(len(self.held), max(self.prefetch, max_messages))

    async def _send(self, max_messages: int) -> None:
        """Send what is due: stale messages nak'ed, a pull request."""
        now = time.monotonic()
        stale = self.held.stale(now)
        if stale:
            LOG.info("nats: %d fetched messages held too long, nak'ed", len(stale))
            await self._nak(stale)
        batch = self._wanted(max_messages, now)
        if batch > 0:
            reply = f"{self.pull_prefix}.{next(self.numbers)}"
            request = {"batch": batch, "expires": int(PULL_EXPIRES_S * 1e9)}
            self.credit.asked(reply, batch, now + PULL_EXPIRES_S + PULL_GRACE_S)
            await self.c.nc.publish(self.next_subject, json.dumps(request).encode(), reply=reply)
        await asyncio.sleep(0)  # nats-py's flusher writes it all

    async def _nak(self, deliveries: Sequence[Delivery]) -> None:
        for d in deliveries:
            await self.c.nc.publish(d.handle.reply, b"-NAK")

    async def _receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        while True:
            self.arrived.clear()  # set again by whatever comes from here on
            await self._send(max_messages)
            got = self.held.take(max_messages)
            if got:
                return got
            if self.failure is not None:
                failure, self.failure = self.failure, None
                raise DriverError(f"nats: {failure}")
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), min(left, PULL_GRACE_S))

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        now = time.monotonic()
        if len(self.held) and not (self.held.has_stale(now) or self._wanted(max_messages, now) > 0):
            return self.held.take(max_messages)  # nothing to send: no system call
        try:
            got: list[Delivery] = self.c.run(self._receive(max_messages, timeout_s))
        except nats.errors.Error as e:
            raise DriverError(f"nats: receive failed: {e}") from e
        return got

    async def _await_confirms(self, most: int) -> None:
        """Until at most ``most`` acks await their confirmation; overdue ones are logged."""
        while True:
            now = time.monotonic()
            late = [r for r, sent in self.unconfirmed.items() if now - sent > self.ack_timeout_s]
            for r in late:
                del self.unconfirmed[r]
            if late:
                self.overdue += len(late)
                LOG.warning(
                    "nats: %d acks not confirmed within %.1f s (their messages may come again)",
                    len(late),
                    self.ack_timeout_s,
                )
            if len(self.unconfirmed) <= most:
                return
            oldest = min(self.unconfirmed.values())
            self.confirmed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.confirmed.wait(), max(oldest + self.ack_timeout_s - now, 0.001)
                )

    async def _ack(self, deliveries: Sequence[Delivery]) -> None:
        nc = self.c.nc
        for d in deliveries:
            if self.ack_sync:
                reply = f"{self.ack_prefix}.{next(self.numbers)}"
                self.unconfirmed[reply] = time.monotonic()
                await nc.publish(d.handle.reply, b"+ACK", reply=reply)
            else:
                await nc.publish(d.handle.reply, b"+ACK")
        await asyncio.sleep(0)  # nats-py's flusher writes them
        await self._await_confirms(CONFIRMS_AWAITED_MAX)

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        ok, refused = self.held.acked(deliveries)
        if ok:
            try:
                self.c.run(self._ack(ok))
            except nats.errors.Error as e:
                raise DriverError(f"nats: ack failed: {e}") from e
        if refused:
            raise DriverError(
                f"nats: {refused} of {len(deliveries)} deliveries were not handed out by this "
                "receiver or were acked already: not acked"
            )

    async def _close(self) -> None:
        await self.pulls.unsubscribe()  # nothing more comes to this receiver
        await self._nak(self.held.drop())  # delivered again at once, to another receiver
        await self._await_confirms(0)
        await self.c.nc.flush(max(1, int(self.ack_timeout_s)))

    def close(self) -> None:
        if self.c.loop.is_closed():
            return  # closed already
        try:
            self.c.run(self._close())
        except Exception as e:  # noqa: BLE001 - closing anyway; unacked messages come again
            LOG.warning("nats: receiver closed without its acks confirmed: %r", e)
        finally:
            self.c.close()


class NatsFetchReceiver(Receiver):
    """``prefetch = 0``: one ``fetch`` per ``receive``; ``ack`` waits (before prefetch)."""

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

        result: dict[str, Any] = self._admin_patiently(
            go, f"cannot tell stream {self.stream}'s leader"
        )
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
                _close_loop(loop)
        return versions


DRIVER = NatsDriver

Settings = NatsSettings  # the profile [settings] schema, by its conventional name
