"""What one sender thread measured (:class:`SenderStats`), and where the worker's
intervals end (:class:`Cuts`); the ticker (:class:`mqlab.workload.recorder.IntervalRecorder`)
turns them into interval logs and counts once per interval."""

from __future__ import annotations

import array
import bisect
import threading
from collections.abc import Callable

import numpy as np
from pyroaring import BitMap64

from mqlab.archive.codecs import COUNT_FIELDS
from mqlab.archive.records import SentSender
from mqlab.workload.schedules import Schedule


class Listeners:
    """Calls to make when something happens (added and removed from any thread)."""

    def __init__(self) -> None:
        self._calls: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def add(self, call: Callable[[], None]) -> None:
        with self._lock:
            self._calls.append(call)

    def remove(self, call: Callable[[], None]) -> None:
        with self._lock:
            self._calls.remove(call)

    def call_all(self) -> None:
        with self._lock:
            calls = list(self._calls)
        for call in calls:
            call()

    def __len__(self) -> int:
        return len(self._calls)


class Cuts:
    """Where the worker's intervals end: every whole wall-clock second, and the measured
    period's start (the warm-up end) once the coordinator told it (``measure_ms``)."""

    def __init__(self) -> None:
        self.measure_ms: int | None = None
        self._listeners = Listeners()

    def set_measure(self, at_ms: int) -> None:
        """The coordinator told the warm-up end: every listener is called."""
        self.measure_ms = at_ms
        self._listeners.call_all()

    def listen(self, call: Callable[[], None]) -> None:
        self._listeners.add(call)

    def unlisten(self, call: Callable[[], None]) -> None:
        self._listeners.remove(call)

    def next_ns(self, wall_ns: int) -> int:
        """The first cut after ``wall_ns`` (wall-clock ns)."""
        cut = (wall_ns // 1_000_000_000 + 1) * 1_000_000_000
        measure = self.measure_ms
        if measure is not None and wall_ns < measure * 1_000_000 < cut:
            cut = measure * 1_000_000
        return cut


class SenderStats:
    """What one sender thread measured (plus its confirmed seqs).

    Counters only ever grow and are written by the owning thread alone; the ticker
    reads them without a lock and takes differences. Latency buffers are swapped
    under an (uncontended) lock.
    """

    def __init__(self, sender_id: int):
        self.sender_id = sender_id
        self.lock = threading.Lock()
        self.call_us = array.array("q")  # confirmed send() calls
        self.batch_sizes = array.array("q")
        self.confirm_ms = array.array("q")  # when each was confirmed (wall ms)
        self.held_back = False  # runs are counted in the interval of their confirmation
        # the wall ms before which every batch confirmed is recorded (closed-loop senders
        # recording runs); None: not sending in runs now, the ticker does not wait
        self.watermark_ms: int | None = None
        self.failed_us = array.array("q")  # failed send() calls: time until the failure
        self.unsent_us = array.array("q")  # never-sent messages: stop time - intended time
        self.confirmed = BitMap64()  # touched only by the owning thread until the end
        self.marks: list[list[int]] = []  # [second ms, first seq sent in it]
        self.sent_total = 0
        self.confirmed_total = 0
        self.failed_total = 0
        self.unsent_total = 0
        self.last_confirm_ms = 0
        self.schedule: Schedule | None = None  # read by the ticker for the lag
        self.in_flight: tuple[int, int] | None = None  # (intended mono ns, n) of a send call
        self._seen = (0, 0, 0, 0)

    def sending(
        self, n: int, intended_ns: int, seq: int | None = None, wall_ms: int | None = None
    ) -> None:
        """``n`` messages from ``seq`` on handed to send() at ``wall_ms``: the first seq
        of each wall-clock second is marked (which messages went out when)."""
        self.sent_total += n
        self.in_flight = (intended_ns, n)
        if seq is not None and wall_ms is not None:
            self._mark(wall_ms * 1_000_000, seq)

    def confirmed_batch(self, first_seq: int, n: int, call_us: int, wall_ms: int) -> None:
        self.in_flight = None
        self.confirmed.add_range(first_seq, first_seq + n)
        with self.lock:
            self.call_us.append(call_us)
            self.batch_sizes.append(n)
            self.confirm_ms.append(wall_ms)
        self.last_confirm_ms = wall_ms
        self.confirmed_total += n

    def confirmed_run(
        self,
        first_seq: int,
        sizes: array.array[int],
        done: int,
        records: array.array[int],
        wall_offset_ns: int,
        intended: array.array[int] | None = None,
    ) -> None:
        """The first ``done`` batches of a run (``Sender.send_run``): ``sizes[i]`` messages
        from ``first_seq`` on, sent at ``records[2i]`` and confirmed at ``records[2i+1]``
        (monotonic ns; + ``wall_offset_ns``: wall clock), each latency from its
        ``intended[i]`` start where given (a fixed-rate batch's slot), else from when it
        was sent. As :meth:`sending` then :meth:`confirmed_batch` of each, in bulk."""
        if done <= 0:
            return
        sizes = sizes[:done]
        total = sum(sizes)
        rec = np.frombuffer(records, dtype=np.int64, count=2 * done).reshape(done, 2)
        starts = rec[:, 0] + wall_offset_ns
        # the first batch of each wall-clock second the run's batches were sent in marks it
        seconds = starts // 1_000_000_000
        firsts = np.flatnonzero(np.diff(seconds, prepend=seconds[0] - 1)).tolist()
        if len(firsts) == 1:
            self._mark(int(starts[0]), first_seq)
        else:
            n = np.frombuffer(sizes, dtype=np.int64)
            seqs = np.cumsum(n) - n + first_seq  # each batch's first seq
            for i in firsts:
                self._mark(int(starts[i]), int(seqs[i]))
        self.confirmed.add_range(first_seq, first_seq + total)
        began = rec[:, 0] if intended is None else np.frombuffer(intended, np.int64, done)
        latencies = ((rec[:, 1] - began) // 1000).tobytes()
        confirmed = (rec[:, 1] + wall_offset_ns) // 1_000_000
        with self.lock:
            self.held_back = True
            self.call_us.frombytes(latencies)
            self.batch_sizes.extend(sizes)
            self.confirm_ms.frombytes(confirmed.tobytes())
            self.sent_total += total
            self.confirmed_total += total
        self.in_flight = None
        self.last_confirm_ms = int(confirmed[-1])

    def _mark(self, wall_ns: int, seq: int) -> None:
        second = wall_ns // 1_000_000_000 * 1000
        if not self.marks or self.marks[-1][0] != second:
            self.marks.append([second, seq])

    def failed(self, n: int, call_us: int) -> None:
        self.in_flight = None
        with self.lock:
            self.failed_us.append(call_us)
        self.failed_total += n

    def unsent(self, latencies_us: np.ndarray) -> None:
        """Messages scheduled before the stop and never sent, with their latencies."""
        if latencies_us.size == 0:
            return
        with self.lock:
            self.unsent_us.frombytes(latencies_us.astype(np.int64).tobytes())
        self.unsent_total += int(latencies_us.size)

    def swap(
        self, end_ms: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, int], int]:
        """What the thread recorded for the interval ending at ``end_ms``: confirmed
        batches' latencies and sizes, failed and unsent latencies, the counts, and the last
        confirmation's wall ms (0: none). Batches of runs confirmed at or after ``end_ms``
        (recorded before the interval closed) stay for the next interval, with their
        messages' counts: a run's batches are counted sent and confirmed together, in the
        interval of their confirmation."""
        with self.lock:
            k = len(self.confirm_ms)
            if end_ms is not None and self.held_back and k:
                k = bisect.bisect_left(self.confirm_ms, end_ms)
            out = (self.call_us[:k], self.batch_sizes[:k], self.failed_us, self.unsent_us)
            held = sum(self.batch_sizes[k:])
            last_ms = self.confirm_ms[k - 1] if k else 0
            del self.call_us[:k], self.batch_sizes[:k], self.confirm_ms[:k]
            self.failed_us = array.array("q")
            self.unsent_us = array.array("q")
            now = (
                self.sent_total - held,
                self.confirmed_total - held,
                self.failed_total,
                self.unsent_total,
            )
        prev, self._seen = self._seen, now
        counts = dict.fromkeys(COUNT_FIELDS, 0)
        for key, a, b in zip(("sent", "confirmed", "failed", "unsent"), now, prev, strict=True):
            counts[key] = a - b
        arrays = [np.frombuffer(a, dtype=np.int64) for a in out]
        return arrays[0], arrays[1], arrays[2], arrays[3], counts, last_ms

    def sent_record(self) -> SentSender:
        return SentSender(
            self.sent_total,
            self.confirmed_total,
            self.failed_total,
            self.unsent_total,
            self.confirmed,
            list(self.marks),
        )
