"""``latency_distribution.txt``: each latency's whole distribution listed as HdrHistogram
lists one, checked line by line against the raw .hlog files merged independently
(``tests/fixtures/reference.py``: hdrh's own log reader and merge)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram

from mqlab.analysis.job import summarize_run
from mqlab.archive import layout
from mqlab.report import distribution, markdown
from tests.fixtures import reference
from tests.fixtures.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run

LINE = re.compile(r"^\s*([\d.]+)\s+([\d.]+)\s+(\d+)(?:\s+([\d.]+))?$")
FOOTER = re.compile(r"^#\[(\w+)\s*=\s*([\d.]+),\s*(\w+)\s*=\s*([\d.]+)\]$")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> SyntheticRun:
    r = write_synthetic_run(
        tmp_path_factory.mktemp("dist"),
        SyntheticSpec(warmup_s=3, duration_s=12, stalls=((6.0, 1.5),), samples_per_interval=80),
    )
    summarize_run(r.run_dir)
    markdown.report_run(r.run_dir)
    return r


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:]
            out[current] = []
        elif current and line.strip() and not line.lstrip().startswith("Value"):
            out[current].append(line)
    return out


def _cumulative(h: HdrHistogram) -> list[tuple[int, int]]:
    """(highest equivalent value in µs, values recorded up to it) of every recorded bucket."""
    out, total = [], 0
    for it in h.get_recorded_iterator():
        total += it.count_at_value_iterated_to
        out.append((h.get_highest_equivalent_value(it.value_iterated_to), total))
    return out


def test_the_report_writes_and_links_the_listing(run: SyntheticRun) -> None:
    path = run.run_dir / distribution.DISTRIBUTION_TXT
    text = path.read_text()
    assert text.startswith("# mqlab latency distribution, format_version 1")
    assert distribution.DISTRIBUTION_TXT in (run.run_dir / "report.md").read_text()
    assert set(_sections(text)) == {
        m for m in layout.METRICS if reference.merged(run.run_dir, m).get_total_count()
    }


def test_every_line_is_the_value_at_its_percentile_of_the_raw_logs(run: SyntheticRun) -> None:
    sections = _sections((run.run_dir / distribution.DISTRIBUTION_TXT).read_text())
    assert "processing_us" in sections and "send_msg_us" in sections
    for metric, lines in sections.items():
        want = reference.merged(run.run_dir, metric, run.warmup_end_ms)
        total = want.get_total_count()
        buckets = _cumulative(want)
        rows = [LINE.match(x) for x in lines if not x.startswith("#")]
        assert rows and all(rows), metric
        fractions = []
        for m in rows:
            assert m is not None
            value_us = round(float(m[1]) * 1000)
            fraction, count = float(m[2]), int(m[3])
            fractions.append(fraction)
            # the count is every raw value at or below the listed value
            assert count == max((c for v, c in buckets if v <= value_us), default=0), metric
            # the listed value is the smallest recorded one that covers the percentile
            assert count >= fraction * total - 1e-6 * total, (metric, m[0])
            below = [c for v, c in buckets if v < value_us]
            assert not below or below[-1] < fraction * total + 1e-6 * total, (metric, m[0])
            if m[4] is not None:
                assert float(m[4]) == pytest.approx(1 / (1 - fraction), abs=0.006)
        assert fractions == sorted(fractions) and fractions[0] == 0.0
        assert fractions[-1] == 1.0 and rows[-1] is not None and rows[-1][4] is None
        assert int(rows[-1][3]) == total  # the last line holds every value
        # enough steps to read the tail: levels beyond 99.9 % are listed
        assert any(0.999 < f < 1.0 for f in fractions) or total < 1000
        footer = [FOOTER.match(x) for x in lines if x.startswith("#")]
        assert len(footer) == 2 and all(footer)
        mean, _stddev = footer[0][2], footer[0][4]  # type: ignore[index]
        top, listed_total = footer[1][2], footer[1][4]  # type: ignore[index]
        assert float(mean) == pytest.approx(want.get_mean_value() / 1000, abs=0.0011)
        assert round(float(top) * 1000) == want.get_max_value()
        assert int(float(listed_total)) == total


def test_no_latency_recorded_writes_no_listing(tmp_path: Path) -> None:
    run = {"run_id": "r"}
    assert distribution.distribution_text(run, []) is None
    assert distribution.write_distribution(run, [], tmp_path) is None
    assert not (tmp_path / distribution.DISTRIBUTION_TXT).exists()
