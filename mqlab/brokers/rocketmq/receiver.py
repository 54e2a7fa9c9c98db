"""A RocketMQ receiver: a ``SimpleConsumer`` of the run's group (the driver's module
docstring says what receive and ack do). The acks of a batch are pipelined: each is its
own AckMessage call, as before, but every call is started before the first is waited
for (``start_ack``), so a batch of n costs about one round trip to the proxy instead of n (one at a
time, a receiver thread of the killed-leader run on a loaded 2-core machine took 25
msgs/s of the 80 confirmed)."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from mqlab.brokers.base import Delivery, Receiver
from mqlab.brokers.rocketmq.library import NO_QUEUES, describe, shutdown
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)
MAX_RECEIVE_BATCH = 32  # the broker pops at most 32 messages per call
RENEW_EVERY_S = 2.0  # at most one new consumer this often while the route stays empty
ACK_WAIT_MARGIN_S = 5.0  # an ack not answered within the client's timeout and this failed


def delivery(message: Any) -> Delivery:
    """A received message as mqlab hands it out: its body, the message itself (for its
    ack), redelivered when the broker counts more than one delivery attempt."""
    attempt = message.delivery_attempt or 1
    return Delivery(bytes(message.body), message, attempt > 1)


def ack_key(message: Any) -> tuple[str, str]:
    """One delivery of a message: its id and the receipt handle of that delivery."""
    return (str(message.message_id), str(message.receipt_handle))


def check_ack(response: Any) -> None:
    """The client's own check of an AckMessage answer: raises unless its status is OK."""
    from rocketmq.v5.util import MessagingResultChecker

    MessagingResultChecker.check(response.status)


def start_ack(consumer: Any, message: Any) -> concurrent.futures.Future[Any]:
    """One AckMessage call started; a future of its outcome (None, or the error). The call
    is what the client's ``ack`` makes and then waits for: ``Consumer.__ack`` (private in
    client 5.1.2, whose public ``ack_async`` returns nothing and whose ``_ack_async``
    returns an asyncio future made outside any loop). A consumer without it (a client
    that renamed it) acks here with its public ``ack``, in turn, as before."""
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()
    started = getattr(consumer, "_Consumer__ack", None)
    if not callable(started):
        try:
            consumer.ack(message)
        except Exception as e:  # noqa: BLE001 - the future carries it
            done.set_exception(e)
        else:
            done.set_result(None)
        return done

    def answered(call: concurrent.futures.Future[Any]) -> None:
        try:
            check_ack(call.result())
        except BaseException as e:  # noqa: BLE001 - the future carries it
            done.set_exception(e)
        else:
            done.set_result(None)

    started(message).add_done_callback(answered)
    return done


class RocketmqReceiver(Receiver):
    def __init__(self, driver: Any, consumer: Any):
        """``driver``: the RocketmqDriver (its settings, topic and new consumers; not
        imported here, which it imports)."""
        self.driver = driver
        self.consumer = consumer
        self.invisible_s = driver.settings.invisible_duration_s
        self.ack_wait_s = driver.settings.request_timeout_s + ACK_WAIT_MARGIN_S
        self.out: Counter[tuple[str, str]] = Counter()  # handed out, unacked -> how often
        self.renewed_at = 0.0
        self.renewals = 0  # consumers started again for an empty route

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        batch = max(1, min(max_messages, MAX_RECEIVE_BATCH))
        try:
            messages = self.consumer.receive(batch, self.invisible_s)
        except Exception as e:
            if NO_QUEUES in str(e):
                self._renew()
            raise DriverError(f"rocketmq: receive failed: {describe(e)}") from e
        out = []
        for m in messages or []:
            if m.corrupted:
                LOG.warning("rocketmq: %s fails its checksum: not handed out", m.message_id)
                continue
            d = delivery(m)
            self.out[ack_key(m)] += 1
            out.append(d)
        return out

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Every delivery handed out and not acked yet is acked, all calls started before
        any is waited for; returns once the broker confirmed each. Failures and refusals
        are reported (DriverError) after the others were acked."""
        refused = 0
        failures: list[BaseException] = []
        calls: list[tuple[tuple[str, str], concurrent.futures.Future[Any]]] = []
        for d in deliveries:
            key = ack_key(d.handle)
            if self.out[key] <= 0:
                refused += 1
                continue
            self.out[key] -= 1  # taken while its call runs: the same delivery twice is refused
            try:
                calls.append((key, start_ack(self.consumer, d.handle)))
            except Exception as e:  # noqa: BLE001 - reported below, after the others
                self.out[key] += 1
                failures.append(e)
        for key, call in calls:
            try:
                call.result(timeout=self.ack_wait_s)
            except Exception as e:  # noqa: BLE001 - reported below; handed out still
                self.out[key] += 1
                failures.append(e)
                continue
            if not self.out[key]:
                del self.out[key]
        if failures:
            raise DriverError(
                f"rocketmq: {len(failures)} of {len(deliveries)} acks failed "
                f"(their messages come again): {describe(failures[0])}"
            )
        if refused:
            raise DriverError(
                f"rocketmq: {refused} of {len(deliveries)} deliveries were not handed out "
                "by this receiver or were acked already: not acked"
            )

    def _renew(self) -> None:
        """A consumer of the same group started again, which asks the proxy for the
        topic's route at once (receipt handles of the old one stay valid: an ack names
        the group, the topic and the handle). Throttled; a failed start keeps the old one."""
        now = time.monotonic()
        if now - self.renewed_at < RENEW_EVERY_S:
            return
        self.renewed_at = now
        try:
            fresh = self.driver._started(self.driver.new_consumer, "simple consumer")
        except DriverError as e:
            LOG.info("rocketmq: a new consumer for the topic's route: %s", e)
            return
        shutdown(self.consumer)
        self.consumer = fresh
        self.renewals += 1
        LOG.info("rocketmq: consumer started again for a fresh route of %s", self.driver.topic)

    def close(self) -> None:
        shutdown(self.consumer)
