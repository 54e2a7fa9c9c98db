"""Schedules: closed loop goes at once; fixed rate spaces batches by 1/rate per message,
stops at the end or the stop event, says how far behind it is and which slots it missed.

Expected values are worked out by hand from the definition (message k's slot is
``start + k / rate``), never with the schedule's own arithmetic."""

from __future__ import annotations

import threading
import time

import numpy as np

from mqlab.workload.schedules import ClosedLoop, FixedRate, make_schedule

MS = 1_000_000  # ns


def test_fixed_rate_intended_starts_follow_the_rate() -> None:
    s = FixedRate(rate_per_s=1000.0, start_ns=0)  # slots long past: no sleeping
    starts = [s.next_batch(n, threading.Event(), None) for n in (1, 5, 10, 2)]
    # 1000 msg/s = 1 ms per message: each batch starts after the previous batch's messages
    assert starts == [0, 1 * MS, 6 * MS, 16 * MS]
    assert s.scheduled == 18


def test_fixed_rate_slots_of_a_rate_with_a_fractional_interval() -> None:
    # 3 msg/s: 333,333,333.3 ns apart; slot k is at floor(k / 3 s), from start 7
    s = FixedRate(rate_per_s=3.0, start_ns=7)
    starts = [s.next_batch(1, threading.Event(), None) for _ in range(4)]
    assert starts == [7, 333_333_340, 666_666_673, 1_000_000_007]
    assert s.scheduled == 4


def test_fixed_rate_over_a_real_window_sends_each_slot_once_and_never_early() -> None:
    """200 msg/s over a window of 100 ms from now: exactly the 20 slots 0, 5, ..., 95 ms,
    each returned no earlier than its slot, then None (the next slot is the end)."""
    stop = threading.Event()
    start = time.monotonic_ns()
    end = start + 100 * MS
    s = FixedRate(rate_per_s=200.0, start_ns=start)
    got = []
    early = []
    while (intended := s.next_batch(1, stop, end)) is not None:
        returned = time.monotonic_ns()
        got.append(intended - start)
        if returned < intended:
            early.append(intended - start)
        assert len(got) <= 20, got
    assert got == [k * 5 * MS for k in range(20)]
    assert early == []
    assert s.scheduled == 20
    # the next call after the end still schedules nothing
    assert s.next_batch(1, stop, end) is None and s.scheduled == 20


def test_fixed_rate_batches_take_as_many_slots_as_messages_within_a_window() -> None:
    """100 msg/s (10 ms a message) in a window of 50 ms already past the slots: batches of
    2 go at 0, 20, 40 ms; the batch at 40 ms goes although its second slot (50 ms) is the
    end, since a batch goes at the slot of its first message."""
    now = time.monotonic_ns()
    start = now - 40 * MS
    end = start + 50 * MS
    s = FixedRate(rate_per_s=100.0, start_ns=start)
    stop = threading.Event()
    got = []
    while (intended := s.next_batch(2, stop, end)) is not None:
        got.append(intended - start)
        assert len(got) <= 3, got
    assert got == [0, 20 * MS, 40 * MS]
    assert s.scheduled == 6


def test_fixed_rate_stops_at_the_end_and_on_stop_without_scheduling() -> None:
    start = time.monotonic_ns() - 500 * MS
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
    stopped = FixedRate(rate_per_s=1000.0, start_ns=0)
    stop.set()
    assert stopped.next_batch(1, stop, None) is None and stopped.scheduled == 0  # slot past


def test_fixed_rate_lag_and_unsent_slots() -> None:
    s = FixedRate(rate_per_s=1000.0, start_ns=0)
    for _ in range(10):
        s.next_batch(1, threading.Event(), None)  # slots 0..9 ms handed out
    assert s.behind_ns(25 * MS) == 15 * MS  # next slot (10 ms) is 15 ms late
    assert s.behind_ns(10 * MS) == 0  # exactly on time
    assert s.behind_ns(5 * MS) == 0
    slots = s.unsent(stop_ns=20 * MS, end_ns=None, limit=None)
    assert slots.tolist() == [k * MS for k in range(10, 20)]  # due before 20 ms
    assert s.unsent(20 * MS, end_ns=15 * MS, limit=None).size == 5  # not past the end
    assert s.unsent(20 * MS, None, limit=12).size == 2  # not past messages_per_thread
    assert s.unsent(20 * MS, None, limit=10).size == 0  # the limit reached: none missed
    assert s.unsent(5 * MS, None, None).size == 0  # stopped before the next slot
    assert s.unsent(20 * MS + 1, None, None).size == 11  # 20 ms is due just before
    s.finish()
    assert s.behind_ns(10**12) == 0


def test_a_sender_catching_up_is_furthest_behind_at_its_first_late_batch() -> None:
    """A stall, then a burst that catches up before the ticker asks: the lag the ticker
    reads is how late the first batch after the stall went out, not 0 (the lag at the
    tick). Slots are in the past (start 0.5 s ago), so nothing sleeps."""
    start = time.monotonic_ns() - 500 * MS
    s = FixedRate(rate_per_s=100.0, start_ns=start)  # slots every 10 ms
    stop = threading.Event()
    first = s.next_batch(1, stop, None)
    late = time.monotonic_ns() - start  # at least how late slot 0 went out
    assert first == start and s.late_max_ns >= 500 * MS - MS
    while s.slot(s.scheduled) < time.monotonic_ns():  # catch up on every missed slot
        s.next_batch(1, stop, None)
    on_time = s.slot(s.scheduled)  # the tick comes exactly at the next slot: no lag then
    assert s.behind_ns(on_time) == 0
    assert late >= s.behind_max_ns(on_time) >= 500 * MS - MS
    assert s.behind_max_ns(on_time) == 0  # read once: the next interval starts afresh
    assert ClosedLoop().behind_max_ns(10**15) == 0


def test_fixed_rate_unsent_before_the_start_and_at_a_fractional_slot() -> None:
    s = FixedRate(rate_per_s=3.0, start_ns=10**9)
    assert s.unsent(10**9, None, None).size == 0  # stopped at the start: nothing due
    assert s.unsent(5, None, None).size == 0
    # 3 msg/s from 1 s, stopped at 2 s: slots 1 s, 1.333 s, 1.667 s were due (2 s is not)
    assert s.unsent(2 * 10**9, None, None).tolist() == [
        1_000_000_000,
        1_333_333_333,
        1_666_666_666,
    ]


def test_fixed_rate_window_of_whole_seconds_holds_rate_times_seconds_messages() -> None:
    # 3 msg/s for 17 s: slots at k/3 s for k = 0..50, i.e. 51 messages; 17 s is the end
    now = time.monotonic_ns()
    start = now - 16_950 * MS  # every slot but the last few ms is already due
    end = start + 17 * 10**9
    s = FixedRate(rate_per_s=3.0, start_ns=start)
    stop = threading.Event()
    n = 0
    while s.next_batch(1, stop, end) is not None:
        n += 1
        assert n <= 60
    assert n == 51


def test_closed_loop_goes_at_once_until_the_end_or_the_stop() -> None:
    c = ClosedLoop()
    stop = threading.Event()
    end = time.monotonic_ns() + 10 * 10**9
    starts = []
    t0 = time.monotonic_ns()
    for n in (1, 10, 3):
        before = time.monotonic_ns()
        intended = c.next_batch(n, stop, end)
        after = time.monotonic_ns()
        assert intended is not None and before <= intended <= after  # now: no slot to wait for
        starts.append(intended)
    assert starts == sorted(starts)
    # three calls with no waiting in between: far less than one fixed-rate slot of 1 msg/s
    assert time.monotonic_ns() - t0 < 100 * MS
    assert c.next_batch(1, stop, None) is not None  # no end: goes on
    stop.set()
    assert c.next_batch(1, stop, None) is None  # the stop event
    assert c.next_batch(1, threading.Event(), end_ns=time.monotonic_ns()) is None  # the end
    assert c.next_batch(1, threading.Event(), end_ns=0) is None


def test_closed_loop_has_no_schedule_to_miss() -> None:
    c = ClosedLoop()
    assert c.next_batch(3, threading.Event(), None) is not None
    assert c.behind_ns(10**15) == 0 and c.unsent(10**15, None, None).size == 0
    assert np.array_equal(c.unsent(1, 1, 1), np.empty(0, np.int64))
    c.finish()
    assert c.behind_ns(10**15) == 0


def test_make_schedule_picks_the_mode_and_passes_rate_and_start() -> None:
    assert isinstance(make_schedule("closed_loop", 0), ClosedLoop)
    s = make_schedule("fixed_rate", 10, start_ns=5)
    assert isinstance(s, FixedRate)
    # 10 msg/s from 5 ns: the third message's slot is 200 ms later
    assert [s.next_batch(1, threading.Event(), None) for _ in range(3)] == [
        5,
        100 * MS + 5,
        200 * MS + 5,
    ]
