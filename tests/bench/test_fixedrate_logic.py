"""bench/fixedrate.py: a lane's batches' lag and own lag, and the goal line."""

from __future__ import annotations

import array

from bench.fixedrate import Row, goals, lane_lags


def test_a_lanes_lag_is_from_its_slot_and_its_own_part_from_its_last_confirmation() -> None:
    slots = array.array("q", [1000, 2000, 3000])
    # batch 0 on time; batch 1 waited for batch 0 (confirmed at 2500), then 10 ns more;
    # batch 2 due at 3000 with batch 1 back at 2800: written 3040
    records = array.array("q", [1000, 2500, 2510, 2800, 3040, 3300])
    lags, last = lane_lags(slots, records, 3, 900)
    assert lags.tolist() == [[1000, 0, 0], [2000, 510, 10], [3000, 40, 40]]
    assert last == 3300
    # the lane's previous run ended after this one's first slot: its wait is the broker's
    lags, _ = lane_lags(array.array("q", [3400]), array.array("q", [3700, 3900]), 1, 3650)
    assert lags.tolist() == [[3400, 300, 50]]


def test_the_goal_line_holds_below_one_ms_and_divides_by_the_threads_figure() -> None:
    lanes = Row("redis", "lanes", 8, 1000.0, 8000.0, 72000, 0.1, 0.8, 3.0, 0.5, 3, 1.2)
    threads = Row("redis", "threads", 8, 1000.0, 8000.0, 72000, 0.1, 1.6, 5.0, 0.7, 5, 2.0)
    [line] = goals([lanes, threads])
    assert "sender lag p99 0.800 ms (goal < 1 ms): met" in line
    assert "a thread per sender 1.600 ms (ratio lanes/threads 0.50)" in line
    assert line.endswith("own part p99 0.500 ms (a thread per sender 0.700 ms)")
    [line] = goals([Row("pg", "lanes", 8, 1000.0, 5000.0, 1, 1, 1.0, 1, 1, 1, 1)])
    assert "(goal < 1 ms): NOT met; own part p99 1.000 ms" in line
