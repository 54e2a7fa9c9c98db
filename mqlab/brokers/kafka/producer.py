"""The senders' librdkafka producer, and the accounting that lets a sender wait only for
its own batch's delivery reports.

Every batch is its own ``Pending``: each delivery report counts down the batch it belongs
to, and a batch is done once all its reports came or one failed. A batch whose sender gave
up (its timeout, or a produce that failed half way) is abandoned: its late reports are
logged and count for no other batch.

Shared (the profile lingers, ``linger_ms`` > 0): one producer for every sender of a
driver (a worker process's senders of one topic), its reports served by one poll thread,
each sender waiting on its batch's event. One producer puts every sender's messages of a
partition into one request, as a native producer with many sending threads does: with a
1 ms linger it used a fifth of the CPU per message of a producer per sender. Not shared
(no linger): each sender has a producer of its own and serves its own reports while it
waits. With ``linger.ms`` 0 and idempotence, librdkafka's broker threads spin whenever
requests queue behind a connection's 5 in-flight ones: one producer for 8 senders (3
connections) then used 5x the CPU per message of a producer each (24 connections).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

LOG = logging.getLogger(__name__)


class Pending:
    """One sender's batch: its reports still to come, its failed deliveries, and an event
    set once it is done (all reported, or one failed)."""

    __slots__ = ("abandoned", "done", "errors", "number", "waiting")

    def __init__(self, number: int, size: int):
        self.number = number
        self.waiting = size
        self.errors: list[Any] = []
        self.done = threading.Event()
        self.abandoned = False
        if size == 0:
            self.done.set()

    def report(self, err: Any, _msg: Any) -> None:
        """A delivery report of one of its messages (called wherever the producer is polled)."""
        if self.abandoned:
            if err is not None:
                LOG.warning("kafka: late delivery error of batch %d: %s", self.number, err)
            else:
                LOG.debug("kafka: late delivery report of batch %d", self.number)
            return
        self.waiting -= 1
        if err is not None:
            self.errors.append(err)
        if self.waiting <= 0 or err is not None:
            self.done.set()


class SharedProducer:
    """A producer (``make()``: anything with librdkafka's ``produce``, ``poll`` and
    ``flush``) for ``users`` senders; ``shared``: polled by a thread of its own while any
    sender is open, else by the one sender waiting for its batch."""

    POLL_S = 0.1  # a poll returns as soon as a report is served; this bounds only the stop

    def __init__(self, make: Callable[[], Any], shared: bool = True):
        self.make = make
        self.shared = shared
        self.lock = threading.Lock()
        self.p: Any = None
        self.users = 0
        self.batches = 0
        self.stopping = threading.Event()
        self.poller: threading.Thread | None = None

    def open(self) -> None:
        """One more sender; the first makes the producer (and the poll thread if shared)."""
        with self.lock:
            if self.p is None:
                self.p = self.make()
                if self.shared:
                    self.stopping.clear()
                    self.poller = threading.Thread(
                        target=self._poll, args=(self.p,), daemon=True, name="kafka-dr"
                    )
                    self.poller.start()
            self.users += 1

    def _poll(self, p: Any) -> None:
        while not self.stopping.is_set():
            try:
                p.poll(self.POLL_S)
            except Exception:  # a report callback that raised: keep serving the others
                LOG.exception("kafka: delivery report handling failed")

    def produce(self, topic: str, batch: Sequence[bytes]) -> Pending:
        """Queue the batch; its ``Pending`` says when every message is reported."""
        with self.lock:
            self.batches += 1
            number = self.batches
        pending = Pending(number, len(batch))
        produce = functools.partial(self.p.produce, topic, on_delivery=pending.report)
        try:
            for m in batch:
                produce(m)
        except Exception:  # part of it queued: its reports must count for nothing
            pending.abandoned = True
            raise
        return pending

    def wait(self, pending: Pending, timeout_s: float) -> bool:
        """Whether the batch is done within ``timeout_s``."""
        if self.shared:
            return pending.done.wait(timeout_s)
        deadline = time.monotonic() + timeout_s
        while not pending.done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.p.poll(min(left, self.POLL_S))  # serves reports, returns at the first
        return True

    def close(self, timeout_s: float) -> None:
        """One sender less; the last one stops the poll thread, flushes what is queued and
        drops the producer."""
        with self.lock:
            self.users -= 1
            if self.users > 0 or self.p is None:
                return
            p, poller, self.p, self.poller = self.p, self.poller, None, None
        self.stopping.set()
        if poller is not None:
            poller.join()
        left = p.flush(timeout_s)
        if left:
            LOG.warning("kafka: %d messages unconfirmed when the producer closed", left)
