"""Senders in lanes: each sender its own connection, all of a thread's driven through
one ``mqlab._sendpath.Lanes`` set (mqlab/_sendpath.c), as the brokers' own benchmark
tools drive theirs. Closed-loop senders send back to back; fixed-rate senders (a lane
with a :class:`FixedRate` schedule) at their slots.

What a thread per sender would record, each lane records:

- **Each lane at its own pace.** A lane's next batch starts as soon as its own last one
  is confirmed; the compiled loop returns to Python at each interval's cut (every whole
  wall-clock second and the warm-up end, :class:`Cuts`), when a lane's run of sizes is
  used up or a lane failed, a connect ended, ``stop`` was set or the warm-up end was told
  (both wake it through a pipe it polls), and leaves the other lanes' batches in flight:
  the next call reads their replies. No lane waits for another, and Python runs about
  once a second, so the client's own time between a lane's batches stays the compiled
  loop's.
- **Each batch's own start.** A batch's start (and its header's intended-send stamp) is
  taken as its own bytes are written; a batch that had to wait for its sender to
  connect again starts when the connecting started, so the reconnect counts in its
  latency, as in a thread that connects inside its send call. Connecting happens on a
  small pool of threads: healthy lanes go on meanwhile.
- **Each fixed-rate batch at its slot** (:meth:`FixedRate.slot` of its first message),
  never before it: the compiled loop is given each batch's slot and waits for the
  earliest pending one in the same poll as the replies. The batch's header is stamped
  with its slot and its latency runs from the slot, so a late batch carries its queueing
  delay. A Redis or PostgreSQL lane keeps up to ``LANE_WINDOW`` (64) batches in flight on
  its connection, so a batch whose slot comes while the earlier ones wait for their
  replies still goes at its slot; a batch goes late only when the window is full (the
  broker 64 batches behind) or the last one's bytes are not all written yet. A NATS or
  Pulsar lane keeps one in flight: the next goes as soon as the last is confirmed. When a batch
  fails, those in flight behind it fail with it (their replies unread: the connection
  is dropped). The schedule's
  ``scheduled`` and ``late_max_ns`` (the ticker's lag) are brought up to date at every
  return, before the watermark, and the lag is taken as of that return (``as_of_ns``:
  the cut, when the ticker reads it); slots never handed to send before the end are the
  caller's ``unsent``. A lane that must connect again connects at its next batch's slot,
  not before.
- **Each batch in the interval of its confirmation.** What the loop returns is recorded
  before the thread sets its watermark (:attr:`SenderStats.watermark_ms`); the ticker
  waits for it before closing an interval, and takes only the batches confirmed before
  the cut (:meth:`SenderStats.swap`).
- **Everything accounted on the way out.** At the end (or ``stop``) no batch starts,
  those in flight are waited for (each bounded by the driver's timeout) and recorded;
  a lane whose failures ran out the error budget has every other lane's outcome
  recorded before the thread fails.
"""

from __future__ import annotations

import array
import concurrent.futures
import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mqlab import envelope
from mqlab.brokers.base import Sender, lanes_engine
from mqlab.errors import DriverError
from mqlab.workload.schedules import FixedRate
from mqlab.workload.senderstats import Cuts, Listeners, SenderStats

RUN_BATCHES = 1024  # sizes handed to a lane at once (its records: two i64 each)
# a fixed-rate lane's run: its slots of FIXED_RUN_S (RUN_BATCHES .. FIXED_RUN_MAX batches);
# a run used up returns to Python, which holds every lane's next batch meanwhile
FIXED_RUN_S = 4.0
FIXED_RUN_MAX = 16384
STOP_POLL_S = 0.05  # how often the stop watcher looks at ``stop``
CONNECTING_MAX = 8  # threads that connect lanes again, at most
NEVER = 2**62


@dataclass
class LaneState:
    """One sender in a lanes set: its client, stats and batch sizes (a ``BatchSizes``),
    its retry, its schedule when it sends at a fixed rate (None: closed loop), the next
    seq and where its current run is."""

    client: Sender
    stats: SenderStats
    sizes: Any  # mqlab.workload.threads.BatchSizes
    retry: Any  # mqlab.workload.threads.Retry
    schedule: FixedRate | None = None
    seq: int = 0  # messages handed to send so far (confirmed or failed)
    run: array.array[int] = field(default_factory=lambda: array.array("q"))
    records: array.array[int] = field(
        default_factory=lambda: array.array("q", bytes(16 * RUN_BATCHES))
    )
    recorded: int = 0  # batches of the run recorded so far
    slots: array.array[int] | None = None  # fixed rate: each batch of the run's slot
    late_seen: int = 0  # batches of the run whose lateness was taken
    assigned: bool = False  # the run is with the compiled set
    resume_ns: int = 0  # backing off until then
    connecting: concurrent.futures.Future[None] | None = None
    connect_start: int = 0
    finished: bool = False  # no more batches: the message limit, or the budget ran out


class _Waker:
    """A pipe the compiled loop polls: a lane's connect that ended wakes it."""

    def __init__(self) -> None:
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # full: it is awake already
            os.write(self.wfd, b"x")

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.rfd, 4096):
                pass

    def wait(self, timeout_s: float) -> None:
        select.select([self.rfd], [], [], max(0.0, timeout_s))

    def close(self) -> None:
        os.close(self.rfd)
        os.close(self.wfd)


class Signal(threading.Event):
    """An event that also calls its listeners when set (the worker's ``stop``): a
    compiled loop is woken by it at once, with no thread looking at it on a timer."""

    def __init__(self) -> None:
        super().__init__()
        self._listeners = Listeners()

    def set(self) -> None:
        super().set()
        self._listeners.call_all()

    def listen(self, call: Callable[[], None]) -> None:
        """Call ``call`` when set (at once if set already)."""
        self._listeners.add(call)
        if self.is_set():
            call()

    def unlisten(self, call: Callable[[], None]) -> None:
        self._listeners.remove(call)


@contextlib.contextmanager
def woken_on_stop(stop: threading.Event, waker: _Waker) -> Iterator[None]:
    """``waker`` woken once ``stop`` is set, while the body runs: by the signal itself, or
    (a plain event) by a thread that looks at it every ``STOP_POLL_S``."""
    if isinstance(stop, Signal):
        stop.listen(waker.wake)
        try:
            yield
        finally:
            stop.unlisten(waker.wake)
        return
    finished = threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(stop, finished, waker), name="lanes-stop", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        watcher.join()


def _watch(stop: threading.Event, finished: threading.Event, waker: _Waker) -> None:
    """Wake the compiled loop once ``stop`` is set (until the lanes are done)."""
    while not finished.is_set():
        if stop.wait(STOP_POLL_S):
            waker.wake()
            return


def drive(
    lanes: Sequence[LaneState],
    pool: envelope.PayloadPool,
    stop: threading.Event,
    start_ns: int,
    end_ns: int | None,
    wall_offset_ns: int,
    cuts: Cuts,
) -> None:
    """Send the lanes' batches (back to back, or at their slots) from ``start_ns`` until
    ``end_ns`` (None: no end), the message limit or ``stop``; when a lane's failures ran
    out its error budget (``retry.backoff`` raised), raises that once every lane's outcome
    is recorded and nothing is in flight."""
    client = lanes[0].client
    engine = lanes_engine()
    proto = type(client).lane_proto
    if engine is None or proto is None:
        raise NotImplementedError(f"{type(client).__name__} does not send in lanes")
    ls = engine(proto, len(lanes), client.lane_timeout_ns())
    waker = _Waker()
    connector = concurrent.futures.ThreadPoolExecutor(
        max_workers=min(len(lanes), CONNECTING_MAX), thread_name_prefix="lane-connect"
    )
    loop = _Loop(lanes, ls, waker, connector, pool, wall_offset_ns)
    for lane in lanes:
        lane.stats.watermark_ms = (start_ns + wall_offset_ns) // 1_000_000
    cuts.listen(waker.wake)
    try:
        with woken_on_stop(stop, waker):
            loop.run(stop, end_ns, cuts)
    finally:
        cuts.unlisten(waker.wake)
        for lane in lanes:
            lane.stats.watermark_ms = None
        connector.shutdown(wait=True)
        waker.close()
        del ls  # its lanes' buffers go back with it
    if loop.failure is not None:
        raise loop.failure


class _Loop:
    def __init__(
        self,
        lanes: Sequence[LaneState],
        ls: Any,
        waker: _Waker,
        connector: concurrent.futures.ThreadPoolExecutor,
        pool: envelope.PayloadPool,
        wall_offset_ns: int,
    ):
        self.lanes, self.ls, self.waker, self.connector = lanes, ls, waker, connector
        self.pool, self.off = pool, wall_offset_ns
        self.failure: Exception | None = None

    def run(self, stop: threading.Event, end_ns: int | None, cuts: Cuts) -> None:
        stop_ns = end_ns if end_ns is not None else NEVER
        while True:
            now = time.monotonic_ns()
            ending = stop.is_set() or self.failure is not None or now >= stop_ns
            if ending:
                stop_ns = min(stop_ns, now)
            for j, lane in enumerate(self.lanes):
                self._connected(j, lane, now, stop_ns)
                idle = not (lane.assigned or lane.connecting or lane.finished or ending)
                if idle and lane.resume_ns <= now:
                    self._arm(j, lane, now)
            busy = [x for x in self.lanes if x.assigned or x.connecting]
            if not busy and (ending or all(x.finished for x in self.lanes)):
                return
            ret = cuts.next_ns(now + self.off) - self.off
            waiting = [x.resume_ns for x in self.lanes if not (x.assigned or x.connecting)]
            waiting = [t for t in waiting if t > now]
            if waiting and not ending:
                ret = min(ret, min(waiting))
            if not any(x.assigned for x in self.lanes):
                self.waker.wait((ret - now) / 1e9)  # all connecting or backing off
                results = None
            else:
                results = self.ls.run(ret, stop_ns, self.off, self.waker.rfd)
            returned = time.monotonic_ns()
            self.waker.drain()
            if results is not None:
                self._record(results, returned, stop_ns)
            mark = (returned + self.off) // 1_000_000
            for lane in self.lanes:
                if lane.schedule is not None:
                    lane.schedule.as_of_ns = returned  # its lag as of then (the ticker's)
                lane.stats.watermark_ms = mark

    # -- a lane's run -------------------------------------------------------------------
    def _arm(self, j: int, lane: LaneState, now: int, first_start: int = 0) -> None:
        """Give the lane its next run of sizes (connecting first, off this thread, when it
        is not connected; at a fixed rate, at its first batch's slot)."""
        sch, connected = lane.schedule, lane.client.lane_connected()
        if sch is not None and not connected and sch.slot(lane.seq) > now:
            lane.resume_ns = sch.slot(lane.seq)
            return
        k = RUN_BATCHES if sch is None else run_batches(sch)
        run = lane.sizes.take(k)
        if not run:
            lane.finished = True
            return
        if len(lane.records) < 2 * len(run):  # not with the compiled set: not assigned
            lane.records = array.array("q", bytes(16 * len(run)))
        lane.run, lane.recorded, lane.late_seen = run, 0, 0
        lane.slots = None if sch is None else slots_of(sch, lane.seq, run)
        if not first_start and not connected:
            lane.connect_start = now
            lane.connecting = self.connector.submit(lane.client.lane_connect)
            # woken once the future is done, not before: a wake from inside the connect
            # could be seen while the future is still running, and the lane would then
            # wait for the next cut
            lane.connecting.add_done_callback(lambda _: self.waker.wake())
            return
        try:
            fd, spec, key, gen = lane.client.lane_args(lane.stats.sender_id, self.pool)
        except DriverError as e:
            self._failed(lane, 0, first_start or now, time.monotonic_ns(), e)
            return
        self.ls.assign(j, fd, spec, run, lane.seq, key, lane.records, first_start, gen, lane.slots)
        lane.assigned = True

    def _connected(self, j: int, lane: LaneState, now: int, stop_ns: int) -> None:
        """A lane whose connect ended: its batch goes (started when connecting did), or
        fails with the connect's error."""
        fut = lane.connecting
        if fut is None or not fut.done():
            return
        lane.connecting = None
        exc = fut.exception()
        if exc is not None:
            self._failed(lane, 0, lane.connect_start, now, exc)
            return
        if lane.connect_start >= stop_ns:
            return
        run = lane.run  # taken when the connect began, not used yet
        try:
            fd, spec, key, gen = lane.client.lane_args(lane.stats.sender_id, self.pool)
        except DriverError as e:
            self._failed(lane, 0, lane.connect_start, time.monotonic_ns(), e)
            return
        start = lane.connect_start
        self.ls.assign(j, fd, spec, run, lane.seq, key, lane.records, start, gen, lane.slots)
        lane.recorded = 0
        lane.assigned = True

    def _record(self, results: list[Any], returned: int, stop_ns: int) -> None:
        """Each assigned lane's confirmed batches since the last call, then its failure or
        the end of its run; a lane out of error budget fails the thread, after all are
        recorded."""
        for j, lane in enumerate(self.lanes):
            if not lane.assigned:
                continue
            # in_flight: batches in flight from batch done on; at a failure, those that were
            # in flight behind the failed batch done (they failed with it)
            done, in_flight, status = results[j]
            if lane.schedule is not None:
                self._late(lane, done + in_flight + (1 if status is not None else 0))
            if done > lane.recorded:
                a, b = lane.recorded, done
                records = lane.records[2 * a : 2 * b]
                if lane.slots is None:
                    lane.stats.confirmed_run(lane.seq, lane.run[a:b], b - a, records, self.off)
                else:  # latencies from the slots
                    lane.stats.confirmed_run(
                        lane.seq, lane.run[a:b], b - a, records, self.off, lane.slots[a:b]
                    )
                lane.seq += sum(lane.run[a:b])
                lane.recorded = done
                lane.retry.ok()
            if status is not None:
                lane.assigned = False
                self.ls.release(j)
                exc = lane.client.lane_outcome(*status)
                lane.client.lane_ran(done, 1 + in_flight)
                started, ended = lane.records[2 * done], lane.records[2 * done + 1]
                lane.sizes.used(done)
                self._failed(lane, done, started, ended, exc or DriverError(str(status)), in_flight)
            elif not in_flight and (done == len(lane.run) or returned >= stop_ns):
                lane.assigned = False
                self.ls.release(j)
                lane.client.lane_ran(done, 0)
                lane.sizes.used(done)
            if lane.schedule is not None and status is None:  # handed to send: in flight too
                lane.schedule.scheduled = lane.seq + sum(lane.run[done : done + in_flight])

    def _late(self, lane: LaneState, started: int) -> None:
        """The latest the run's batches started since the last call went after their
        slots (the schedule's ``late_max_ns``, read by the ticker)."""
        assert lane.schedule is not None and lane.slots is not None
        a = lane.late_seen
        if started > a:
            starts = np.frombuffer(lane.records, np.int64, 2 * started)[2 * a :: 2]
            late = int((starts - np.frombuffer(lane.slots, np.int64, started)[a:]).max())
            lane.schedule.late_max_ns = max(lane.schedule.late_max_ns, late)
            lane.late_seen = started

    def _failed(
        self,
        lane: LaneState,
        i: int,
        started: int,
        ended: int,
        exc: BaseException,
        behind: int = 0,
    ) -> None:
        """Record the run's batch ``i`` failed (``started`` .. ``ended``, monotonic ns; at
        a fixed rate it started at its slot), and the ``behind`` batches that were in
        flight behind it (each from its own start to the same end), and set the lane's
        backoff; a lane out of error budget stops, and fails the thread."""
        for k in range(i, i + 1 + behind):
            n = lane.run[k]
            if k > i:
                started = lane.records[2 * k]
            if lane.slots is not None:
                started = lane.slots[k]
            stats = lane.stats
            stats.sending(n, started, lane.seq, (started + self.off) // 1_000_000)
            stats.failed(n, (ended - started) // 1000)
            lane.seq += n
            lane.sizes.used(1)
        if lane.schedule is not None:
            lane.schedule.scheduled = lane.seq
        try:
            backoff_s = lane.retry.backoff(exc, "send")
        except Exception as e:  # noqa: BLE001 - ThreadFailed: recorded, then raised
            lane.finished = True
            if self.failure is None:
                self.failure = e
            return
        lane.resume_ns = time.monotonic_ns() + int(backoff_s * 1e9)


def run_batches(schedule: FixedRate) -> int:
    """How many batches a fixed-rate lane's run holds (see FIXED_RUN_S)."""
    return min(FIXED_RUN_MAX, max(RUN_BATCHES, int(schedule.rate_per_s * FIXED_RUN_S)))


def slots_of(schedule: FixedRate, seq: int, run: array.array[int]) -> array.array[int]:
    """The slot of each batch of ``run`` (sizes), its first message ``seq``."""
    n = np.frombuffer(run, np.int64)
    out = array.array("q")
    out.frombytes(schedule.slots(np.cumsum(n) - n + seq).tobytes())
    return out
