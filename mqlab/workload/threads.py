"""The sender and receiver thread loops of one worker process."""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass

from mqlab import clock
from mqlab.drivers.base import Driver
from mqlab.scenario import Workload
from mqlab.workload import envelope
from mqlab.workload.recorder import ReceiverStats, SenderStats
from mqlab.workload.schedules import make_schedule

LOG = logging.getLogger(__name__)
ERROR_BUDGET_S = 30.0  # a thread gives up after this long without one successful call


class ThreadFailed(Exception):
    pass


@dataclass
class Retry:
    """Backoff between failed broker calls; fails the thread after ERROR_BUDGET_S."""

    errors: int = 0
    failing_since: float | None = None

    def ok(self) -> None:
        self.errors = 0
        self.failing_since = None

    def failed(self, exc: BaseException, stop: threading.Event, what: str) -> None:
        now = time.monotonic()
        self.errors += 1
        if self.failing_since is None:
            self.failing_since = now
        LOG.warning("%s failed (%d in a row): %s", what, self.errors, exc)
        if now - self.failing_since > ERROR_BUDGET_S:
            raise ThreadFailed(f"{what} failing for {ERROR_BUDGET_S:.0f} s: {exc}") from exc
        stop.wait(min(0.05 * 2 ** min(self.errors, 5), 1.0))


def run_sender(
    driver: Driver,
    w: Workload,
    stats: SenderStats,
    pool: envelope.PayloadPool,
    seed: int,
    stop: threading.Event,
    ready: threading.Barrier,
    go: threading.Event,
) -> None:
    """Connect, wait for the common start (``go``), then send on the schedule until the
    duration, the message limit or ``stop``; finally record the messages whose slot
    passed but that were never sent (``unsent``)."""
    client = driver.sender()
    try:
        ready.wait()
        while not go.wait(0.05):
            if stop.is_set():
                return
        start_ns = time.monotonic_ns()
        wall_offset_ns = clock.wall_ns() - time.monotonic_ns()  # monotonic -> wall, once
        schedule = make_schedule(w.mode, w.rate_per_s, start_ns)
        stats.schedule = schedule
        end_ns = start_ns + int(w.duration_s * 1e9) if w.duration_s else None
        limit = w.messages_per_thread or None
        rng = random.Random(seed)
        sid = stats.sender_id
        seq = 0
        lo, span = w.send_batch_min, w.send_batch_max - w.send_batch_min + 1
        retry = Retry()
        try:
            while limit is None or seq < limit:
                n = lo + int(rng.random() * span)
                if limit is not None:
                    n = min(n, limit - seq)
                intended = schedule.next_batch(n, stop, end_ns)
                if intended is None:
                    break
                stats.sending(n, intended, seq, (time.monotonic_ns() + wall_offset_ns) // 1_000_000)
                try:
                    client.send_stamped(sid, seq, n, intended + wall_offset_ns, pool)
                except Exception as exc:  # noqa: BLE001 - any broker failure counts, then retry
                    stats.failed(n, (time.monotonic_ns() - intended) // 1000)
                    seq += n
                    retry.failed(exc, stop, "send")
                    continue
                done = time.monotonic_ns()
                stats.confirmed_batch(
                    seq, n, (done - intended) // 1000, (done + wall_offset_ns) // 1_000_000
                )
                retry.ok()
                seq += n
        finally:
            stopped = time.monotonic_ns()
            slots = schedule.unsent(stopped, end_ns, limit)
            stats.unsent((stopped - slots) // 1000)
            schedule.finish()
    finally:
        client.close()


def run_receiver(
    driver: Driver,
    w: Workload,
    stats: ReceiverStats,
    stop: threading.Event,
    ready: threading.Barrier,
) -> None:
    """Receive, record and ack until ``stop`` (the coordinator ends the drain)."""
    client = driver.receiver()
    try:
        ready.wait()
        retry = Retry()
        while not stop.is_set():
            try:
                batch = client.receive(w.receive_batch_max, 0.5)
            except Exception as exc:  # noqa: BLE001
                retry.failed(exc, stop, "receive")
                continue
            if not batch:
                retry.ok()
                continue
            recv_ns = clock.wall_ns()  # compared with the sender host's stamp
            again = [i for i, d in enumerate(batch) if d.redelivered] or None
            stats.received([d.payload for d in batch], recv_ns, again)
            try:
                client.ack(batch)
            except Exception as exc:  # noqa: BLE001 - unacked: they come again (at least once)
                retry.failed(exc, stop, "ack")
                continue
            stats.acked(len(batch))
            retry.ok()
    finally:
        client.close()
