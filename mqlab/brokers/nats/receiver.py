"""The NATS receivers: standing pull requests into a local buffer (``NatsReceiver``, with
its ``Credit``), or one fetch per receive with ``prefetch = 0`` (``NatsFetchReceiver``);
the module docstring of ``mqlab.brokers.nats.driver`` says how they behave."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from mqlab.brokers.base import (
    Delivery,
    Receiver,
)
from mqlab.brokers.held import Held
from mqlab.brokers.nats.client import Client, NatsLink, NatsSettings
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)


PULL_EXPIRES_S = 2.0  # how long a standing pull request waits on the server
PULL_GRACE_S = 0.5  # ...and how much longer before the receiver gives up on hearing its end
HOLD_FRACTION = 0.5  # a fetched message held longer than this part of ack_wait_s is nak'ed


CONFIRMS_AWAITED_MAX = 1024  # ack_sync: acks awaiting their confirmation before ack() waits


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

    def __init__(self, driver: NatsLink):
        s: NatsSettings = driver.settings
        self.c = Client(driver)
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

    def __init__(self, driver: NatsLink):
        self.c = Client(driver)
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
