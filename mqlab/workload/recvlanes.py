"""Receivers in lanes: each receiver its own connection, all of a worker's driven from one
thread through the driver's :meth:`Driver.receive_lanes` (PostgreSQL and Redis Streams:
mqlab/_recvpath.c; RocketMQ and Kafka: their lanes.py, Kafka's records read in C), as the
brokers' own consumer tools drive theirs.

What a thread per receiver records, each lane records: its batches' headers, receive
times and redelivery flags (in bulk, :meth:`ReceiverStats.received_headers`), what it
acked, and its failures with the same backoff and error budget (a failed lane sits out
its backoff while the others go on). The compiled loop returns at each interval's cut
(every whole wall-clock second and the warm-up end) and at ``stop`` (a pipe it polls),
every batch it received acked by then unless its lane failed (that batch comes again
after its lease, flagged redelivered), and what it returns is recorded in the interval it
was received in: each receiver's stats carry a watermark (the wall ms before which all it
received is recorded) that the ticker waits for before it closes an interval, and a new
cut (the warm-up end, told by the coordinator) wakes the compiled loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from mqlab import clock
from mqlab.brokers.base import Driver, Receiver
from mqlab.scenario.model import Workload
from mqlab.workload.lanes import _Waker, woken_on_stop
from mqlab.workload.recorder import ReceiverStats
from mqlab.workload.senderstats import Cuts
from mqlab.workload.threads import Retry

RETURN_NS = 1_000_000_000  # the compiled loop returns at least this often


def run_receiver_lanes(
    drivers: Sequence[Driver],
    w: Workload,
    stats: Sequence[ReceiverStats],
    stop: threading.Event,
    ready: threading.Barrier,
    cuts: Cuts | None = None,
) -> None:
    """Receivers (one per driver and stats) driven from this thread until ``stop``, all in
    one call of the first driver's ``receive_lanes`` (the drivers are a worker's: one
    class, one profile, a queue each)."""
    cuts = cuts or Cuts()
    receivers: list[Receiver] = []
    waker = _Waker()
    cuts.listen(waker.wake)
    for st in stats:
        st.watermark_ms = clock.wall_ms()
    try:
        receivers += [d.receiver() for d in drivers]
        ready.wait()
        with woken_on_stop(stop, waker):
            _receive(drivers[0], receivers, w, stats, stop, cuts, waker)
    finally:
        cuts.unlisten(waker.wake)
        for st in stats:
            st.watermark_ms = None
        waker.close()
        for receiver in receivers:
            receiver.close()


def _receive(
    driver: Driver,
    receivers: Sequence[Receiver],
    w: Workload,
    stats: Sequence[ReceiverStats],
    stop: threading.Event,
    cuts: Cuts,
    waker: _Waker,
) -> None:
    """The lanes' calls until ``stop`` (each receiver's connection runs its own queue's
    statement: one driver's ``receive_lanes`` drives them all)."""
    retries = [Retry(w.error_budget_s) for _ in receivers]
    resume_ns = [0] * len(receivers)
    while not stop.is_set():
        now = time.monotonic_ns()
        offset = clock.wall_ns() - now
        until = min(now + RETURN_NS, cuts.next_ns(now + offset) - offset)
        going = [i for i in range(len(receivers)) if resume_ns[i] <= now]
        if not going:  # all backing off: until the first may go again
            stop.wait(max(0.0, (min(resume_ns) - now) / 1e9))
            mark = clock.wall_ms()
            for st in stats:
                st.watermark_ms = mark
            continue
        got = driver.receive_lanes(
            [receivers[i] for i in going], w.receive_batch_max, until, offset, waker.rfd
        )
        mark = (time.monotonic_ns() + offset) // 1_000_000  # all before it is in got
        waker.drain()
        for i, r in zip(going, got, strict=True):
            st = stats[i]
            st.received_headers(r.headers, r.recv_ns, r.lens, r.flagged, r.received, r.short)
            st.acked(r.acked)
            if r.error is None:
                retries[i].ok()
            else:
                delay = retries[i].backoff(r.error, "receive")  # raises past the budget
                resume_ns[i] = time.monotonic_ns() + int(delay * 1e9)
        for st in stats:
            st.watermark_ms = mark
