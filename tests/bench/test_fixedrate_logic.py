"""bench/fixedrate.py: a lane's batches' lag and own lag, and the goal line."""

from __future__ import annotations

import array

import numpy as np

from bench.fixedrate import Row, goals, lane_lags


def test_a_lanes_lag_is_from_its_slot_and_its_own_part_from_its_last_confirmation() -> None:
    """A window of 1 (a batch in flight): the own part runs from the later of the slot
    and the last batch's confirmation."""
    slots = array.array("q", [1000, 2000, 3000])
    # batch 0 on time; batch 1 waited for batch 0 (confirmed at 2500), then 10 ns more;
    # batch 2 due at 3000 with batch 1 back at 2800: written 3040
    records = array.array("q", [1000, 2500, 2510, 2800, 3040, 3300])
    lags, last = lane_lags(slots, records, 3, np.array([900]), 1)
    assert lags.tolist() == [[1000, 0, 0], [2000, 510, 10], [3000, 40, 40]]
    assert last.tolist() == [3300]
    # the lane's previous run ended after this one's first slot: its wait is the broker's
    lags, _ = lane_lags(
        array.array("q", [3400]), array.array("q", [3700, 3900]), 1, np.array([3650]), 1
    )
    assert lags.tolist() == [[3400, 300, 50]]


def test_a_lanes_own_lag_in_a_window_runs_from_the_room_its_window_had() -> None:
    """A window of 2: batch k could go once batch k - 2 was confirmed; the lane's first
    batches (no batch 2 before them) from their slots; the last 2 confirmations carry on
    to the next run."""
    slots = array.array("q", [1000, 2000, 3000, 4000])
    # batches 0 and 1 at their slots, in flight together; batch 2 due at 3000 went at
    # 3600, 100 after batch 0's confirmation (3500); batch 3 due at 4000, room since
    # batch 1's confirmation at 3700: written 4020
    records = array.array("q", [1000, 3500, 2005, 3700, 3600, 3900, 4020, 4100])
    lags, last = lane_lags(slots, records, 4, np.zeros(0, np.int64), 2)
    assert lags.tolist() == [[1000, 0, 0], [2000, 5, 5], [3000, 600, 100], [4000, 20, 20]]
    assert last.tolist() == [3900, 4100]
    # the next run's first batch: room once batch 2 of the last run (3900) was back
    lags, last = lane_lags(array.array("q", [3800]), array.array("q", [3950, 4200]), 1, last, 2)
    assert lags.tolist() == [[3800, 150, 50]]
    assert last.tolist() == [4100, 4200]


def test_the_goal_line_holds_below_one_ms_and_divides_by_the_threads_figure() -> None:
    lanes = Row("redis", "lanes", 8, 1000.0, 8000.0, 72000, 0.1, 0.8, 3.0, 0.5, 3, 1.2, 1)
    threads = Row("redis", "threads", 8, 1000.0, 8000.0, 72000, 0.1, 1.6, 5.0, 0.7, 5, 2.0)
    [line] = goals([lanes, threads])
    assert (
        "1,000 msgs/s (batches of 1) in lanes, sender lag p99 0.800 ms (goal < 1 ms): met" in line
    )
    assert "a thread per sender 1.600 ms (ratio lanes/threads 0.50)" in line
    assert line.endswith("own part p99 0.500 ms (a thread per sender 0.700 ms)")
    [line] = goals([Row("pg", "lanes", 8, 1000.0, 5000.0, 1, 1, 1.0, 1, 1, 1, 1)])
    assert "(goal < 1 ms): NOT met; own part p99 1.000 ms" in line
