"""A RocketMQ sender through the official gRPC client (the driver's ``client = "grpc"``):
a batch in one SendMessage call built by the client's own steps, and what keeps its
producer's queues while a route lists no writable one (the driver's module docstring
says why)."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Sequence
from typing import Any

from mqlab.brokers.base import Sender
from mqlab.brokers.rocketmq.library import NO_QUEUES, describe, shutdown
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)


ROUTE_LOOKUP_EVERY_S = 1.0  # at most one route lookup of a sender this often


def writable(route: Any) -> bool:
    """Whether a route lists a queue a producer may send to (the client's own filter)."""
    return any(q.is_writable() and q.is_master_broker() for q in route.message_queues)


def keep_writable_queues(producer: Any) -> None:
    """``producer``'s queue selectors follow a new route only when it lists a writable
    queue (module docstring: a route looked up while the group has no master). Wraps the
    client's hook its route lookups call (``update_queue_selector``); a client without
    one is left alone."""
    update = getattr(producer, "update_queue_selector", None)
    if update is None:
        return

    def update_when_writable(topic: str, route: Any) -> None:
        if writable(route):
            update(topic, route)
        else:
            LOG.warning("rocketmq: a route of %s lists no writable queue: queues kept", topic)

    producer.update_queue_selector = update_when_writable


def send_batch(producer: Any, messages: list[Any]) -> Any | None:
    """One SendMessage call carrying every message of the batch, started; the call's
    future (None: this client lacks what it takes, the caller sends each on its own).

    The proxy stores a call's messages as one batch: one append to the DLedger group,
    answered once 2 of 3 brokers have all of them (or none), each message its own entry
    in the topic's queue. Client 5.1.2 sends one message per call (``send_async``); its
    request is built here by its own private steps (``Producer.__wrap_sending_message``
    gives each message its id and type, ``__select_send_queue`` the queue, ``__send_req``
    the request), their messages joined into one request, sent as the client sends one
    (``rpc_client.send_message_async``, signed, the client's request timeout). The client
    retries no such call: a failed batch is the runner's to retry (at least once)."""
    wrap = getattr(producer, "_Producer__wrap_sending_message", None)
    select = getattr(producer, "_Producer__select_send_queue", None)
    request = getattr(producer, "_Producer__send_req", None)
    if not (callable(wrap) and callable(select) and callable(request)):
        return None
    for m in messages:
        wrap(m, False)
    queue = select(messages[0])
    req = request(messages[0])
    for m in messages[1:]:
        req.messages.extend(request(m).messages)
    timeout = producer.client_configuration.request_timeout
    return producer.rpc_client.send_message_async(
        queue.endpoints, req, producer.sign(), timeout=timeout
    )


def check_sent(response: Any, n: int) -> None:
    """The client's own check of a SendMessage answer (raises unless OK), and one entry
    per message or one for the whole batch (the proxy's answer to a batch)."""
    from rocketmq.v5.util import MessagingResultChecker

    MessagingResultChecker.check(response.status)
    entries = list(response.entries)
    if len(entries) not in (1, n):
        raise DriverError(f"rocketmq: {len(entries)} send results for a batch of {n}")
    for e in entries:
        if e.status.code != response.status.code:
            MessagingResultChecker.check(e.status)


class RocketmqSender(Sender):
    def __init__(self, driver: Any, producer: Any):
        """``driver``: the RocketmqDriver (its settings, topic and messages; not imported
        here, which it imports)."""
        self.producer = producer
        self.topic = driver.topic
        self.timeout_s = driver.settings.send_timeout_s
        self.new_message = driver.new_message
        self.looked_up_at = -ROUTE_LOOKUP_EVERY_S
        self.lookups = 0  # routes looked up again for a route with no writable queue
        keep_writable_queues(producer)

    def send(self, batch: Sequence[bytes]) -> None:
        try:
            call = send_batch(self.producer, [self.new_message(b) for b in batch])
        except Exception as e:
            if NO_QUEUES in str(e):
                self._look_up_route()
            raise DriverError(f"rocketmq: send failed: {describe(e)}") from e
        if call is not None:
            try:
                check_sent(call.result(timeout=self.timeout_s), len(batch))
            except Exception as e:
                raise DriverError(
                    f"rocketmq: a batch of {len(batch)} failed or was unconfirmed after "
                    f"{self.timeout_s:g} s: {describe(e)}"
                ) from e
            return
        self._send_each(batch)

    def _send_each(self, batch: Sequence[bytes]) -> None:
        """A SendMessage call per message, all started, then awaited: the client's public
        ``send_async`` (a client without what ``send_batch`` uses)."""
        futures = []
        try:
            for payload in batch:
                futures.append(self.producer.send_async(self.new_message(payload)))
        except Exception as e:
            if NO_QUEUES in str(e):
                self._look_up_route()
            raise DriverError(f"rocketmq: send failed: {describe(e)}") from e
        done, pending = concurrent.futures.wait(futures, timeout=self.timeout_s)
        failed = [e for e in (f.exception() for f in done) if e is not None]
        if pending or failed:
            first = f": {describe(failed[0])}" if failed else ""
            raise DriverError(
                f"rocketmq: {len(failed)} of {len(batch)} messages failed and {len(pending)} "
                f"were unconfirmed after {self.timeout_s:g} s{first}"
            )

    def _look_up_route(self) -> None:
        """The topic's route asked of the proxy now, as the client's 30 s schedule does
        (the producer's queue selector follows it). Throttled; a failed lookup is logged
        and the cached route stays."""
        now = time.monotonic()
        if now - self.looked_up_at < ROUTE_LOOKUP_EVERY_S:
            return
        self.looked_up_at = now
        self.lookups += 1
        try:
            self.producer.route_manager.update_topic_route(self.topic)
        except Exception as e:  # noqa: BLE001 - the next empty route tries again
            LOG.info("rocketmq: looking up the route of %s: %s", self.topic, describe(e))
            return
        LOG.info("rocketmq: route of %s looked up again (it had no writable queue)", self.topic)

    def close(self) -> None:
        shutdown(self.producer)
