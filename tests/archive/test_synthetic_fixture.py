"""The synthetic fixture writes coherent version 2 archives: read back with the archive's
own readers, its counters, records and logs agree with each other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mqlab.archive import codecs, hlog, layout, records
from mqlab.archive.formats import FORMAT_VERSION
from tests.fixtures.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run


def _rows(wdir: Path) -> list[codecs.CountsRow]:
    rows, problems = codecs.parse_counts((wdir / layout.COUNTS).read_text())
    assert problems == []
    return rows


def test_every_record_is_version_2_and_counts_have_the_v2_header(edge_run: SyntheticRun) -> None:
    for path in edge_run.run_dir.rglob("*.json"):
        assert json.loads(path.read_text())["format_version"] == FORMAT_VERSION, path
    for path in edge_run.run_dir.glob("workers/*/counts.csv"):
        assert path.read_text().startswith(codecs.counts_header())


def test_counters_records_and_logs_agree(edge_run: SyntheticRun) -> None:
    run_dir = edge_run.run_dir
    confirmed = received = first = redelivered = foreign = 0
    for wdir in layout.worker_dirs(run_dir):
        rows = _rows(wdir)
        worker = records.read_worker(wdir / layout.WORKER)
        assert worker.messages == codecs.sum_counts(rows)
        for metric in layout.LOGS[worker.role]:
            path = layout.log_file(wdir, metric)
            lines, problem = hlog.read_lines(str(path))
            assert problem is None and lines is not None
            ivs = [i for i in hlog.parse_log(str(path), lines) if isinstance(i, hlog.Interval)]
            assert [(i.start_ms, i.end_ms) for i in ivs] == [(r.start_ms, r.end_ms) for r in rows]
        if worker.role == "sender":
            sent = records.read_sent(wdir / layout.SENT)
            assert sorted(sent) == worker.sender_ids
            assert sum(s.confirmed for s in sent.values()) == worker.messages["confirmed"]
            assert all(len(s.confirmed_seqs) == s.confirmed for s in sent.values())
            confirmed += worker.messages["confirmed"]
        else:
            rec = records.read_delivery(wdir / layout.DELIVERY)
            assert rec.foreign == worker.foreign == worker.messages["foreign"]
            got = rec.senders.values()
            assert sum(s.first_received for s in got) == worker.messages["first_received"]
            assert sum(s.received for s in got) + rec.foreign == worker.messages["received"]
            assert sum(s.redelivered for s in got) == worker.messages["redelivered"]
            received += worker.messages["received"]
            first += worker.messages["first_received"]
            redelivered += worker.messages["redelivered"]
            foreign += rec.foreign
        assert all(r.last_ms == 0 or r.start_ms <= r.last_ms < r.end_ms for r in rows)
    truth = edge_run.delivery
    assert (confirmed, received - foreign, first, redelivered) == (
        truth["confirmed"],
        truth["received"],
        truth["first_received"],
        truth["redelivered"],
    )
    und = records.read_undrained(run_dir / layout.UNDRAINED)
    assert und.identified and und.count == truth["undrained"]
    assert foreign + und.foreign == truth["foreign"]


def test_stalls_leave_intervals_without_counts_and_a_growing_lag(edge_run: SyntheticRun) -> None:
    rows = _rows(edge_run.run_dir / layout.WORKERS / "sender-00")
    lagging = [r for r in rows if r.lag_ms]
    assert [r.lag_ms for r in lagging] == [250, 1250, 2250]
    assert [r.counts["confirmed"] for r in lagging[1:]] == [0, 0]
    assert all(r.last_ms == 0 for r in lagging[1:])


def test_omitted_files_are_not_written(tmp_path: Path) -> None:
    omit = ("workers/receiver-01/delivery.json", "workers/sender-00/send_msg_us.hlog")
    r = write_synthetic_run(tmp_path, SyntheticSpec(duration_s=3, omit=omit, undrained="missing"))
    for rel in (*omit, layout.UNDRAINED):
        assert not (r.run_dir / rel).exists()
    assert (r.run_dir / "workers/receiver-00/delivery.json").is_file()


def test_impossible_edge_cases_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="two receiver nodes"):
        write_synthetic_run(tmp_path, SyntheticSpec(receiver_nodes=1, cross_delivered_per_sender=1))
    with pytest.raises(ValueError, match="too few messages"):
        write_synthetic_run(tmp_path, SyntheticSpec(duration_s=1, lost_per_sender=500))
