"""Schedules: closed loop goes at once; fixed rate spaces batches by 1/rate per message."""

from __future__ import annotations

import threading

from mqlab.workload.schedules import ClosedLoop, FixedRate, make_schedule


def test_fixed_rate_intended_starts_follow_the_rate() -> None:
    stop = threading.Event()
    stop.set()  # never actually sleep: the intended times are what matters
    s = FixedRate(rate_per_s=1000.0, start_ns=0)
    starts = [s.next_batch(n, stop) for n in (1, 5, 10, 2)]
    # 1000 msg/s = 1 ms per message: each batch starts after the previous batch's messages
    assert starts == [0, 1_000_000, 6_000_000, 16_000_000]


def test_make_schedule_picks_the_mode() -> None:
    assert isinstance(make_schedule("closed_loop", 0), ClosedLoop)
    assert isinstance(make_schedule("fixed_rate", 10), FixedRate)
