"""A RocketMQ receiver: a ``SimpleConsumer`` of the run's group (the driver's module
docstring says what receive and ack do). The acks of a batch go in one AckMessage call
(``start_acks``: the entries of every message received through the same proxy and topic,
each answered by the proxy), so a batch of n costs one round trip and one request
instead of n (one call per ack, waited for in turn, a receiver thread of the
killed-leader run on a loaded 2-core machine took 25 msgs/s of the 80 confirmed). A
client without the steps it takes acks each message with a call of its own, all started
before the first is waited for (``start_ack``)."""

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


def start_acks(consumer: Any, messages: Sequence[Any]) -> list[concurrent.futures.Future[Any]]:
    """The acks of ``messages`` started; a future of each one's outcome (None, or its
    error). One AckMessage call carries the acks of every message received through the
    same proxy endpoints and topic (``AckMessageRequest.entries``; the proxy answers each
    entry): the request is the client's own (``Consumer.__ack_req``, private in client
    5.1.2, whose calls carry one entry each), the others' entries joined to it, sent as
    the client sends one (``rpc_client.ack_message_async``, signed, its request timeout).
    A consumer without those steps acks each message with ``start_ack``."""
    request = getattr(consumer, "_Consumer__ack_req", None)
    rpc = getattr(consumer, "rpc_client", None)
    if not callable(request) or rpc is None:
        return [start_ack(consumer, m) for m in messages]
    futures: list[concurrent.futures.Future[Any]] = []
    groups: dict[tuple[str, str], list[tuple[Any, concurrent.futures.Future[Any]]]] = {}
    for m in messages:
        f: concurrent.futures.Future[Any] = concurrent.futures.Future()
        futures.append(f)
        groups.setdefault((repr(m.endpoints), str(m.topic)), []).append((m, f))
    for group in groups.values():
        req = request(group[0][0])
        for m, _ in group[1:]:
            req.entries.extend(request(m).entries)
        call = rpc.ack_message_async(
            group[0][0].endpoints,
            req,
            metadata=consumer.sign(),
            timeout=consumer.client_configuration.request_timeout,
        )
        call.add_done_callback(lambda c, g=group: _answer_each(c, g))
    return futures


def _answer_each(call: concurrent.futures.Future[Any], group: list[tuple[Any, Any]]) -> None:
    """Each message's future from the answer to its group's AckMessage call: the call's
    error or refusal is every message's; otherwise each entry's status is its message's
    (matched by receipt handle; a message the answer names not is acked when the call's
    status is OK, failed otherwise: several results, none of them its)."""
    try:
        response = call.result()
        check_ack(response)
    except BaseException as e:  # noqa: BLE001 - every message's future carries it
        for _, f in group:
            f.set_exception(e)
        return
    from rocketmq.grpc_protocol.definition_pb2 import Code

    by_handle = {str(e.receipt_handle): e for e in response.entries}
    for m, f in group:
        entry = by_handle.get(str(m.receipt_handle))
        try:
            if entry is not None:
                check_ack(entry)
            elif response.status.code != Code.OK:
                raise DriverError(f"rocketmq: the ack answer names no result for {m.message_id}")
        except BaseException as e:  # noqa: BLE001 - this message's future carries it
            f.set_exception(e)
        else:
            f.set_result(None)


def _kept(response: Any) -> bool:
    """A ReceiveMessage response the client reads: a message, the status or the time of
    delivery (its ``__receive_message_response`` keeps those)."""
    return bool(
        response.HasField("message")
        or response.HasField("status")
        or response.HasField("delivery_timestamp")
    )


async def _responses(call: Any) -> list[Any]:
    """Every response of a ReceiveMessage stream that the client reads, as its own step
    collects them, without formatting each as text first for a debug line."""
    return [r async for r in call if _kept(r)]


def lean_receive(consumer: Any) -> None:
    """The consumer's receive collects the stream's responses with ``_responses``:
    client 5.1.2 (``Consumer.__receive_message_response``, private) formats every
    response, its message and body included, into the text of a debug log line before
    the logger can drop it, ~180 us per 1 KiB message on this machine (2026-11-28),
    more than the rest of a receive. The messages, their checksum check and the status
    check are the client's as before. A consumer without that step is left alone."""
    if callable(getattr(consumer, "_Consumer__receive_message_response", None)):
        consumer._Consumer__receive_message_response = _responses


class RocketmqReceiver(Receiver):
    def __init__(self, driver: Any, consumer: Any):
        """``driver``: the RocketmqDriver (its settings, topic and new consumers; not
        imported here, which it imports)."""
        self.driver = driver
        self.consumer = consumer
        lean_receive(consumer)
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
        taken: list[tuple[tuple[str, str], Any]] = []
        for d in deliveries:
            key = ack_key(d.handle)
            if self.out[key] <= 0:
                refused += 1
                continue
            self.out[key] -= 1  # taken while its call runs: the same delivery twice is refused
            taken.append((key, d.handle))
        calls: list[tuple[tuple[str, str], concurrent.futures.Future[Any]]] = []
        try:
            started = start_acks(self.consumer, [m for _, m in taken])
        except Exception as e:  # noqa: BLE001 - reported below, after the others
            for key, _ in taken:
                self.out[key] += 1
            failures.append(e)
        else:
            calls = [(key, f) for (key, _), f in zip(taken, started, strict=True)]
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
        lean_receive(fresh)
        self.consumer = fresh
        self.renewals += 1
        LOG.info("rocketmq: consumer started again for a fresh route of %s", self.driver.topic)

    def close(self) -> None:
        shutdown(self.consumer)
