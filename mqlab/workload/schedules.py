"""When senders send: closed loop (as fast as confirmations allow) or a fixed rate.

``next_batch(n, stop, end_ns)`` blocks until the batch may go and returns its
*intended* start (monotonic ns), or ``None`` when the thread must stop first (the
stop event, ``end_ns`` has passed, or the next slot falls at or after it). Latency is measured from
the intended start, so a fixed-rate sender that falls behind reports the queueing
delay too (no coordinated omission); messages whose slot passed before the sender
stopped but that were never sent are reported by ``unsent`` with their slots.
"""

from __future__ import annotations

import math
import threading
import time
from abc import ABC, abstractmethod

import numpy as np


class Schedule(ABC):
    @abstractmethod
    def next_batch(self, n: int, stop: threading.Event, end_ns: int | None) -> int | None:
        """Intended start (``time.monotonic_ns()`` clock) of a batch of ``n`` messages."""

    def behind_ns(self, now_ns: int) -> int:
        """How far the sender is behind its schedule at ``now_ns`` (0: on time)."""
        return 0

    def behind_max_ns(self, now_ns: int) -> int:
        """The most the sender was behind since the last call: at ``now_ns`` and when
        each batch since went out (a sender catching up after a stall is furthest behind
        at its first batch, not at the interval's end). Read by the ticker only."""
        return self.behind_ns(now_ns)

    def unsent(self, stop_ns: int, end_ns: int | None, limit: int | None) -> np.ndarray:
        """Intended starts of the messages due before the sender stopped at ``stop_ns``
        (and before ``end_ns``) that were never handed to send()."""
        return np.empty(0, np.int64)

    def finish(self) -> None:  # noqa: B027 - optional hook
        """The sender stopped: it is behind no schedule any more."""


class ClosedLoop(Schedule):
    def next_batch(self, n: int, stop: threading.Event, end_ns: int | None) -> int | None:
        now = time.monotonic_ns()
        if stop.is_set() or (end_ns is not None and now >= end_ns):
            return None
        return now


class FixedRate(Schedule):
    """``rate_per_s`` messages per second for this thread; message k's slot is
    ``start_ns + k / rate``, and a batch goes at the slot of its first message."""

    def __init__(self, rate_per_s: float, start_ns: int | None = None):
        self.rate_per_s = rate_per_s
        self.ns_per_msg = 1e9 / rate_per_s
        self.start_ns = start_ns if start_ns is not None else time.monotonic_ns()
        self.scheduled = 0  # messages handed out so far (read by the ticker for the lag)
        self.done = False
        # the latest a batch went out after its slot since the ticker last asked; the
        # ticker's reset may lose one concurrent batch's figure, never more (the next
        # late batch sets it again)
        self.late_max_ns = 0
        # set by a lanes thread (mqlab.workload.lanes), which brings ``scheduled`` up to
        # date only when its compiled loop returns: the lag is taken as of then
        self.as_of_ns: int | None = None

    def slot(self, k: int) -> int:
        # k * 1e9 / rate, not k * (1e9 / rate): the latter rounds whole seconds down by 1 ns
        return self.start_ns + int(k * 1e9 / self.rate_per_s)

    def slots(self, k: np.ndarray) -> np.ndarray:
        """:meth:`slot` of each of ``k`` (int64), the same figures."""
        return self.start_ns + (k * 1e9 / self.rate_per_s).astype(np.int64)

    def next_batch(self, n: int, stop: threading.Event, end_ns: int | None) -> int | None:
        intended = self.slot(self.scheduled)
        if end_ns is not None and (intended >= end_ns or time.monotonic_ns() >= end_ns):
            return None  # the run is over: slots still due are reported as unsent
        delay = (intended - time.monotonic_ns()) / 1e9
        if delay > 0 and stop.wait(delay):
            return None
        if stop.is_set():
            return None
        self.scheduled += n
        late = time.monotonic_ns() - intended
        if late > self.late_max_ns:
            self.late_max_ns = late
        return intended

    def behind_ns(self, now_ns: int) -> int:
        if self.done:
            return 0
        if self.as_of_ns is not None:
            now_ns = min(now_ns, self.as_of_ns)
        return max(0, now_ns - self.slot(self.scheduled))

    def behind_max_ns(self, now_ns: int) -> int:
        late, self.late_max_ns = self.late_max_ns, 0
        return max(late, self.behind_ns(now_ns))

    def unsent(self, stop_ns: int, end_ns: int | None, limit: int | None) -> np.ndarray:
        horizon = stop_ns if end_ns is None else min(stop_ns, end_ns)
        if horizon <= self.start_ns:
            return np.empty(0, np.int64)
        due_n = math.ceil((horizon - self.start_ns) / self.ns_per_msg)  # slots before horizon
        while due_n > 0 and self.slot(due_n - 1) >= horizon:
            due_n -= 1
        if limit is not None:
            due_n = min(due_n, limit)
        if due_n <= self.scheduled:
            return np.empty(0, np.int64)
        return self.slots(np.arange(self.scheduled, due_n, dtype=np.int64))

    def finish(self) -> None:
        self.done = True


def make_schedule(mode: str, rate_per_s: float, start_ns: int | None = None) -> Schedule:
    return FixedRate(rate_per_s, start_ns) if mode == "fixed_rate" else ClosedLoop()
