"""bench/processes.py: a side's msgs/s is the sum over its processes, and the ratio."""

from __future__ import annotations

from bench.processes import Side, format_result


def test_a_side_sums_its_processes_and_the_ratio_divides_the_sums() -> None:
    one = Side(1, 8, (1000.0,), 8.0, 8.0)
    two = Side(2, 4, (900.0, 700.0), 8.0, 12.0)
    assert two.rate == 1600.0 and two.cores == 1.5
    text = format_result(one, two)
    assert "2 process(es) x 4 threads" in text and "900 + 700" in text
    assert text.splitlines()[-1] == "ratio 2-process / 1-process: 1.60 (1,600 / 1,000 msgs/s)"
