"""When senders send: closed loop (as fast as confirmations allow) or a fixed rate.

``next_batch(n)`` blocks until the batch may go and returns its *intended* start
(monotonic ns). Send latency is measured from the intended start, so a fixed-rate
sender that falls behind reports the queueing delay too (no coordinated omission).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod


class Schedule(ABC):
    @abstractmethod
    def next_batch(self, n: int, stop: threading.Event) -> int:
        """Intended start (``time.monotonic_ns()`` clock) of a batch of ``n`` messages."""


class ClosedLoop(Schedule):
    def next_batch(self, n: int, stop: threading.Event) -> int:
        return time.monotonic_ns()


class FixedRate(Schedule):
    """``rate_per_s`` messages per second for this thread, batches spaced accordingly."""

    def __init__(self, rate_per_s: float, start_ns: int | None = None):
        self.ns_per_msg = 1e9 / rate_per_s
        self.start_ns = start_ns if start_ns is not None else time.monotonic_ns()
        self.scheduled = 0  # messages scheduled so far

    def next_batch(self, n: int, stop: threading.Event) -> int:
        intended = self.start_ns + int(self.scheduled * self.ns_per_msg)
        self.scheduled += n
        delay = (intended - time.monotonic_ns()) / 1e9
        if delay > 0:
            stop.wait(delay)
        return intended


def make_schedule(mode: str, rate_per_s: float) -> Schedule:
    return FixedRate(rate_per_s) if mode == "fixed_rate" else ClosedLoop()
