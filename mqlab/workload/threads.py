"""The sender and receiver thread loops of one worker process."""

from __future__ import annotations

import array
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mqlab import clock, envelope
from mqlab.brokers.base import Driver, Lane, Sender, lanes_engine
from mqlab.scenario.model import Workload
from mqlab.workload import lanes as lanes_mod
from mqlab.workload.recorder import ReceiverStats
from mqlab.workload.schedules import ClosedLoop, FixedRate, Schedule, make_schedule
from mqlab.workload.senderstats import Cuts, SenderStats

LOG = logging.getLogger(__name__)
RUN_BATCHES = 64  # a closed-loop sender's batches per run (Sender.send_run), at most
RUN_NS = 20_000_000  # and its time: stop and the end are looked at at least this often
WATERMARK_WAIT_S = 0.25  # the ticker waits this long, at most, for a run to be recorded


class ThreadFailed(Exception):
    pass


@dataclass
class Retry:
    """Backoff between failed broker calls; fails the thread after ``budget_s`` of them
    without one success (the scenario's ``workload.error_budget_s``)."""

    budget_s: float
    errors: int = 0
    failing_since: float | None = None

    def ok(self) -> None:
        self.errors = 0
        self.failing_since = None

    def backoff(self, exc: BaseException, what: str) -> float:
        """Count a failure; the seconds to wait before the next call (raises ThreadFailed
        after ``budget_s`` of failures)."""
        now = time.monotonic()
        self.errors += 1
        if self.failing_since is None:
            self.failing_since = now
        LOG.warning("%s failed (%d in a row): %s", what, self.errors, exc)
        if now - self.failing_since > self.budget_s:
            raise ThreadFailed(
                f"{what} failing for {self.budget_s:g} s (workload.error_budget_s): {exc}"
            ) from exc
        return min(0.05 * 2 ** min(self.errors, 5), 1.0)

    def failed(self, exc: BaseException, stop: threading.Event, what: str) -> None:
        """Count a failure and wait out the backoff (or until ``stop``)."""
        stop.wait(self.backoff(exc, what))


@dataclass
class _Lane:
    """One closed-loop sender of a thread: its client (connection), stats, batch sizes and
    the next seq; a failed lane sits out its backoff until ``resume_ns``."""

    client: Sender
    stats: SenderStats
    sizes: BatchSizes
    retry: Retry
    seq: int = 0
    resume_ns: int = 0
    run: array.array[int] = field(default_factory=lambda: array.array("q"))
    records: array.array[int] = field(
        default_factory=lambda: array.array("q", bytes(16 * RUN_BATCHES))
    )


class _Start:
    """The senders' common start: once ``go`` is set, the monotonic start, the run's end
    and the monotonic -> wall clock offset; None if ``stop`` came first."""

    def __init__(self, w: Workload, stop: threading.Event, go: threading.Event):
        self.ok = False
        while not go.wait(0.05):
            if stop.is_set():
                return
        self.ok = True
        self.start_ns = time.monotonic_ns()
        self.wall_offset_ns = clock.wall_ns() - time.monotonic_ns()  # monotonic -> wall, once
        self.end_ns = self.start_ns + int(w.duration_s * 1e9) if w.duration_s else None


def run_sender(
    driver: Driver,
    w: Workload,
    stats: SenderStats,
    pool: envelope.PayloadPool,
    seed: int,
    stop: threading.Event,
    ready: threading.Barrier,
    go: threading.Event,
    cuts: Cuts | None = None,
) -> None:
    """Connect, wait for the common start (``go``), then send on the schedule until the
    duration, the message limit or ``stop``; finally record the messages whose slot
    passed but that were never sent (``unsent``)."""
    client = driver.sender()
    try:
        ready.wait()
        start = _Start(w, stop, go)
        if not start.ok:
            return
        schedule = make_schedule(w.mode, w.rate_per_s, start.start_ns)
        stats.schedule = schedule
        limit = w.messages_per_thread or None
        sizes = BatchSizes(random.Random(seed), w.send_batch_min, w.send_batch_max, limit)
        try:
            if isinstance(schedule, ClosedLoop) and in_lanes(client):
                state = lanes_mod.LaneState(client, stats, sizes, Retry(w.error_budget_s))
                _drive([state], pool, stop, start, cuts)
            elif isinstance(schedule, ClosedLoop):
                lane = _Lane(client, stats, sizes, Retry(w.error_budget_s))
                _closed_loop([lane], _one_by_one, pool, stop, start, cuts or Cuts())
            else:
                retry = Retry(w.error_budget_s)
                _on_schedule(client, stats, schedule, sizes, pool, stop, start, retry)
        finally:
            _finish(stats, time.monotonic_ns(), start.end_ns, limit)
    finally:
        client.close()


def _drive(
    lanes: list[lanes_mod.LaneState],
    pool: envelope.PayloadPool,
    stop: threading.Event,
    start: _Start,
    cuts: Cuts | None,
) -> None:
    """``lanes`` driven through one compiled set from this thread (``lanes_mod.drive``)."""
    lanes_mod.drive(
        lanes, pool, stop, start.start_ns, start.end_ns, start.wall_offset_ns, cuts or Cuts()
    )


def _finish(stats: SenderStats, stopped: int, end_ns: int | None, limit: int | None) -> None:
    """A stopped sender's slots that passed unsent recorded; its schedule finished."""
    schedule = stats.schedule
    assert schedule is not None
    slots = schedule.unsent(stopped, end_ns, limit)
    stats.unsent((stopped - slots) // 1000)
    schedule.finish()


def in_lanes(client: Sender) -> bool:
    """Whether this sender's closed-loop batches go through ``mqlab._sendpath.Lanes`` (a
    set of one, in a thread per sender)."""
    return type(client).lane_proto is not None and lanes_engine() is not None


def run_sender_lanes(
    drivers: Sequence[Driver],
    w: Workload,
    stats: Sequence[SenderStats],
    pool: envelope.PayloadPool,
    seeds: Sequence[int],
    stop: threading.Event,
    ready: threading.Barrier,
    go: threading.Event,
    cuts: Cuts | None = None,
) -> None:
    """Senders (one per driver, stats and seed; closed loop or each at the fixed rate),
    all driven from this thread in one ``mqlab._sendpath.Lanes`` set
    (``mqlab.workload.lanes``; each sender its own connection, as with a thread each), as
    the brokers' own benchmark tools do; finally each fixed-rate sender's ``unsent``."""
    clients: list[Sender] = []
    try:
        clients += [d.sender() for d in drivers]
        ready.wait()
        start = _Start(w, stop, go)
        if not start.ok:
            return
        limit = w.messages_per_thread or None
        lanes = []
        for client, st, seed in zip(clients, stats, seeds, strict=True):
            st.schedule = schedule = make_schedule(w.mode, w.rate_per_s, start.start_ns)
            fixed = schedule if isinstance(schedule, FixedRate) else None
            sizes = BatchSizes(random.Random(seed), w.send_batch_min, w.send_batch_max, limit)
            lanes.append(lanes_mod.LaneState(client, st, sizes, Retry(w.error_budget_s), fixed))
        try:
            _drive(lanes, pool, stop, start, cuts)
        finally:
            stopped = time.monotonic_ns()
            for st in stats:
                _finish(st, stopped, start.end_ns, limit)
    finally:
        for client in clients:
            client.close()


class BatchSizes:
    """The sizes of a sender's batches, drawn from its seeded generator in order (the same
    sizes whether they are sent one by one or in runs), up to the message limit."""

    def __init__(self, rng: random.Random, lo: int, hi: int, limit: int | None):
        self.rng = rng
        self.lo, self.span = lo, hi - lo + 1
        self.limit = limit
        self.drawn = 0  # messages in the sizes drawn so far
        self.plan = array.array("q")  # sizes drawn, not yet used, from pos on
        self.pos = 0

    def _draw(self, k: int) -> None:
        """Draw up to ``k`` more sizes (fewer at the limit) onto the plan."""
        if self.pos:
            del self.plan[: self.pos]
            self.pos = 0
        lo, span = self.lo, self.span
        if span == 1:
            sizes = [lo] * k
        else:
            rand = self.rng.random
            sizes = [lo + int(rand() * span) for _ in range(k)]
        if self.limit is not None:
            room = self.limit - self.drawn
            for i, n in enumerate(sizes):
                if n >= room:
                    sizes[i] = room
                    del sizes[i + 1 :]
                    break
                room -= n
            sizes = [n for n in sizes if n > 0]
        self.drawn += sum(sizes)
        self.plan.extend(sizes)

    def take(self, k: int) -> array.array[int]:
        """The next ``k`` sizes (fewer at the limit); :meth:`used` says how many went."""
        if len(self.plan) - self.pos < k:
            self._draw(max(k, 64))
        return self.plan[self.pos : self.pos + k]

    def used(self, k: int) -> None:
        self.pos += k

    def next(self) -> int:
        """The next batch's size, used; 0 once the limit is reached."""
        if self.pos >= len(self.plan):
            self._draw(64)
            if not self.plan:
                return 0
        n = self.plan[self.pos]
        self.pos += 1
        return n


def _on_schedule(
    client: Sender,
    stats: SenderStats,
    schedule: Schedule,
    sizes: BatchSizes,
    pool: envelope.PayloadPool,
    stop: threading.Event,
    start: _Start,
    retry: Retry,
) -> None:
    """A batch at a time, each when the schedule says (fixed rate)."""
    sid, end_ns, wall_offset_ns = stats.sender_id, start.end_ns, start.wall_offset_ns
    seq = 0
    while (n := sizes.next()) > 0:
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


def _one_by_one(
    lanes: Sequence[Lane], until_ns: int, wall_offset_ns: int, pool: envelope.PayloadPool
) -> list[tuple[int, Exception | None]]:
    """One lane's run through its client's ``send_run``."""
    (lane,) = lanes
    return [
        lane.client.send_run(
            lane.sender, lane.first_seq, lane.sizes, until_ns, wall_offset_ns, pool, lane.records
        )
    ]


def _closed_loop(
    lanes: Sequence[_Lane],
    send: Callable[..., list[tuple[int, Exception | None]]],
    pool: envelope.PayloadPool,
    stop: threading.Event,
    start: _Start,
    cuts: Cuts,
) -> None:
    """Batches back to back in runs (``send``: one lane's ``send_run``) of at most
    RUN_BATCHES batches and RUN_NS, none started at or after the next cut (a whole
    wall-clock second or the warm-up end, where the worker's ticker closes an interval);
    each run is recorded before the thread's watermark passes the cut, and the ticker
    waits for it (at most WATERMARK_WAIT_S), so that each batch lands in the interval of
    its confirmation; between runs, ``stop`` and the end are looked at, and a failed
    lane's backoff is waited out (by that lane alone)."""
    end_ns, wall_offset_ns = start.end_ns, start.wall_offset_ns
    live = list(lanes)
    for lane in live:
        lane.stats.watermark_ms = (start.start_ns + wall_offset_ns) // 1_000_000
    try:
        _runs(live, send, pool, stop, end_ns, wall_offset_ns, cuts)
    finally:
        for lane in lanes:
            lane.stats.watermark_ms = None


def _runs(
    live: list[_Lane],
    send: Callable[..., list[tuple[int, Exception | None]]],
    pool: envelope.PayloadPool,
    stop: threading.Event,
    end_ns: int | None,
    wall_offset_ns: int,
    cuts: Cuts,
) -> None:
    while live and not stop.is_set():
        now = time.monotonic_ns()
        if end_ns is not None and now >= end_ns:
            break
        going: list[_Lane] = []
        for lane in live:
            if lane.resume_ns <= now:
                lane.run = lane.sizes.take(RUN_BATCHES)
                going.append(lane)
        live = [lane for lane in live if lane.resume_ns > now or lane.run]
        going = [lane for lane in going if lane.run]
        if not going:
            if live:  # all backing off: until the first may go again
                stop.wait(max(0.0, (min(lane.resume_ns for lane in live) - now) / 1e9))
            continue
        until = min(now + RUN_NS, cuts.next_ns(now + wall_offset_ns) - wall_offset_ns)
        if end_ns is not None:
            until = min(until, end_ns)
        runs = [
            Lane(lane.client, lane.stats.sender_id, lane.seq, lane.run, lane.records)
            for lane in going
        ]
        try:
            results = send(runs, until, wall_offset_ns, pool)
        except Exception as exc:  # noqa: BLE001 - e.g. no connection: each first batch failed
            failed_at = time.monotonic_ns()
            for lane in going:
                lane.records[0], lane.records[1] = now, failed_at
            results = [(0, exc)] * len(going)
        returned = time.monotonic_ns()
        failed: ThreadFailed | None = None
        for lane, (done, failure) in zip(going, results, strict=True):
            try:
                _ran(lane, done, failure, wall_offset_ns)
            except ThreadFailed as e:  # every lane's outcome is recorded first
                failed = failed or e
        mark = (returned + wall_offset_ns) // 1_000_000
        for lane in going:
            lane.stats.watermark_ms = mark
        if failed is not None:
            raise failed


def _ran(lane: _Lane, done: int, failure: Exception | None, wall_offset_ns: int) -> None:
    """Record a lane's run: its ``done`` confirmed batches, then the failed one, if any."""
    stats, run, records = lane.stats, lane.run, lane.records
    stats.confirmed_run(lane.seq, run, done, records, wall_offset_ns)
    lane.seq += sum(run[:done])
    used = done
    if done:
        lane.retry.ok()  # a failure after confirmed batches is the first in a row
    if failure is not None:
        n = run[done]
        started = records[2 * done]
        stats.sending(n, started, lane.seq, (started + wall_offset_ns) // 1_000_000)
        stats.failed(n, (records[2 * done + 1] - started) // 1000)
        lane.seq += n
        used += 1
        lane.resume_ns = time.monotonic_ns() + int(lane.retry.backoff(failure, "send") * 1e9)
    lane.sizes.used(used)


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
        retry = Retry(w.error_budget_s)
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
