"""The interval-log reader: mqlab's logs, other tools' logs, bad lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.analysis import partials
from mqlab.archive import hlog
from mqlab.archive.codecs import new_histogram
from tests.fixtures.synthetic import SyntheticRun


def _payload(values: list[int]) -> str:
    h = new_histogram()
    for v in values:
        h.record_value(v)
    return h.encode().decode("ascii")


def _parse(path: Path) -> list[object]:
    lines, problem = hlog.read_lines(str(path))
    assert problem is None and lines is not None
    return list(hlog.parse_log(str(path), lines))


def test_reads_mqlab_log_with_aligned_absolute_times(synthetic_run: SyntheticRun) -> None:
    path = synthetic_run.run_dir / "workers" / "receiver-00" / "processing_us.hlog"
    items = _parse(path)
    header = items[0]
    assert isinstance(header, hlog.LogHeader)
    assert header.version == "1.3" and header.mqlab is not None
    assert header.mqlab["metric"] == "processing_us"
    intervals = [i for i in items if isinstance(i, hlog.Interval)]
    assert intervals[0].start_ms == 1763806925250  # BaseTime + 0.000
    assert all(i.end_ms % 1000 == 0 for i in intervals[:-1])  # whole seconds
    assert all(a.end_ms == b.start_ms for a, b in zip(intervals, intervals[1:], strict=False))


def test_reads_tagged_version_1_2_log_with_absolute_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "java.hlog"
    path.write_text(
        "#[Logged with jHiccup version 2.0.10]\n"
        "#[Histogram log format version 1.2]\n"
        "#[StartTime: 1500000000.000 (seconds since epoch), Fri Jul 14 02:40:00 UTC 2017]\n"
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        f"Tag=a,1500000001.000,1.000,0.010,{_payload([10, 20])}\n"
        f"Tag=b,1500000002.000,1.000,0.030,{_payload([30])}\n"
        f"1500000003.000,1.000,0.040,{_payload([40])}\n"
    )
    ivs = [i for i in _parse(path) if isinstance(i, hlog.Interval)]
    assert [i.tag for i in ivs] == ["a", "b", None]
    assert [i.start_ms for i in ivs] == [1500000001000, 1500000002000, 1500000003000]


def test_relative_timestamps_without_base_time_use_start_time(tmp_path: Path) -> None:
    path = tmp_path / "rel.hlog"
    path.write_text(
        f"#[StartTime: 1000.500 (seconds since epoch)]\n2.000,1.000,0.010,{_payload([5])}\n"
    )
    ivs = [i for i in _parse(path) if isinstance(i, hlog.Interval)]
    assert ivs[0].start_ms == 1002500 and ivs[0].end_ms == 1003500


def test_corrupt_and_truncated_lines_are_reported_with_line_numbers(tmp_path: Path) -> None:
    good = _payload([100, 200, 300])
    path = tmp_path / "bad.hlog"
    path.write_text(
        "#[Histogram log format version 1.3]\n"
        "#[BaseTime: 0.000 (seconds since epoch)]\n"
        f"0.000,1.000,0.300,{good}\n"  # line 3
        "1.000,1.000,garbage\n"  # line 4: 3 fields
        f"x.000,1.000,0.300,{good}\n"  # line 5: not a number
        f"2.000,1.000,0.300,{good[:-20]}\n"  # line 6: truncated payload
        f"3.000,1.000,0.300,{good[:40]}"  # line 7: truncated last line, no newline
    )
    out = partials.run_locally([partials.Task("logfile", "", str(path))])
    problems = out[("prb", "")]
    assert [(p[1], p[2].split(":")[0]) for p in problems] == [
        (4, "expected 4 comma-separated fields, found 3 (truncated or corrupt)"),
        (5, "timestamp, length or max is not a number"),
        (6, "histogram does not decode"),
        (7, "histogram does not decode"),
    ]
    assert all(p[0] == str(path) for p in problems)
    figs = out[("log", str(path), None)]
    assert figs["count"] == 3 and figs["intervals"] == 1  # the good line still counts


def test_missing_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.hlog")
    out = partials.run_locally([partials.Task("logfile", "", missing)])
    assert out == {("prb", ""): [(missing, None, "missing file")]}


def test_writer_output_reads_back_interval_by_interval(tmp_path: Path) -> None:
    path = tmp_path / "w.hlog"
    start_ms = 1_790_000_000_250
    values = [[5, 6], [], [7_000_000]]
    with path.open("w") as f:
        w = hlog.IntervalLogWriter(f, start_ms, "mqlab metric=x unit=us")
        for i, vals in enumerate(values):
            h = new_histogram()
            for v in vals:
                h.record_value(v)
            w.write(h, start_ms + i * 1000, start_ms + (i + 1) * 1000 - (i == 2) * 400)
    items = _parse(path)
    ivs = [i for i in items if isinstance(i, hlog.Interval)]
    assert [(i.start_ms, i.end_ms) for i in ivs] == [
        (start_ms, start_ms + 1000),
        (start_ms + 1000, start_ms + 2000),
        (start_ms + 2000, start_ms + 2600),
    ]
    counts = [hlog.decode(i.payload).get_total_count() for i in ivs]
    assert counts == [2, 0, 1]
    max_ms = float(path.read_text().splitlines()[-1].split(",")[2])  # Interval_Max in ms
    assert max_ms == pytest.approx(7000, rel=1e-3)
