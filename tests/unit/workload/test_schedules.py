"""Schedules: closed loop goes at once; fixed rate spaces batches by 1/rate per message,
stops at the end or the stop event, says how far behind it is and which slots it missed."""

from __future__ import annotations

import threading
import time

import numpy as np

from mqlab.workload.schedules import ClosedLoop, FixedRate, make_schedule


def test_fixed_rate_intended_starts_follow_the_rate() -> None:
    s = FixedRate(rate_per_s=1000.0, start_ns=0)  # slots long past: no sleeping
    starts = [s.next_batch(n, threading.Event(), None) for n in (1, 5, 10, 2)]
    # 1000 msg/s = 1 ms per message: each batch starts after the previous batch's messages
    assert starts == [0, 1_000_000, 6_000_000, 16_000_000]
    assert s.scheduled == 18


def test_fixed_rate_stops_at_the_end_and_on_stop_without_scheduling() -> None:
    start = time.monotonic_ns() - 500_000_000
    s = FixedRate(rate_per_s=1.0, start_ns=start)
    end = start + 10**9  # half a second from now
    assert s.next_batch(1, threading.Event(), end_ns=end) == start
    assert s.next_batch(1, threading.Event(), end_ns=end) is None  # the next slot is the end
    assert s.scheduled == 1
    late = FixedRate(rate_per_s=1000.0, start_ns=0)
    assert late.next_batch(1, threading.Event(), end_ns=10**15) == 0
    assert late.next_batch(1, threading.Event(), end_ns=1) is None  # the end has passed
    future = FixedRate(rate_per_s=1.0, start_ns=time.monotonic_ns() + 10**9)
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    t0 = time.monotonic()
    assert future.next_batch(1, stop, None) is None  # woken by stop: not scheduled
    assert time.monotonic() - t0 < 0.5 and future.scheduled == 0


def test_fixed_rate_lag_and_unsent_slots() -> None:
    s = FixedRate(rate_per_s=1000.0, start_ns=0)
    for _ in range(10):
        s.next_batch(1, threading.Event(), None)  # slots 0..9 ms handed out
    assert s.behind_ns(25_000_000) == 15_000_000  # next slot (10 ms) is 15 ms late
    assert s.behind_ns(5_000_000) == 0
    slots = s.unsent(stop_ns=20_000_000, end_ns=None, limit=None)
    assert slots.tolist() == [k * 1_000_000 for k in range(10, 20)]  # due before 20 ms
    assert s.unsent(20_000_000, end_ns=15_000_000, limit=None).size == 5  # not past the end
    assert s.unsent(20_000_000, None, limit=12).size == 2  # not past messages_per_thread
    s.finish()
    assert s.behind_ns(10**12) == 0


def test_closed_loop_has_no_schedule_to_miss() -> None:
    c = ClosedLoop()
    assert c.next_batch(3, threading.Event(), None) is not None
    assert c.next_batch(3, threading.Event(), end_ns=0) is None
    assert c.behind_ns(10**15) == 0 and c.unsent(10**15, None, None).size == 0
    assert np.array_equal(c.unsent(1, 1, 1), np.empty(0, np.int64))


def test_make_schedule_picks_the_mode() -> None:
    assert isinstance(make_schedule("closed_loop", 0), ClosedLoop)
    assert isinstance(make_schedule("fixed_rate", 10), FixedRate)
