"""The archive's typed records: each writer's output reads back equal, and a bad or old
record is one line naming the file and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyroaring import BitMap64

from mqlab.archive import records
from mqlab.archive.formats import write_json
from mqlab.errors import ArchiveError


def test_records_round_trip_with_64_bit_seqs(tmp_path: Path) -> None:
    seqs = BitMap64([0, 5, 2**32 + 5, 2**40])
    sent = {3: records.SentSender(10, 8, 1, 1, seqs)}
    records.write_sent(tmp_path / "sent.json", sent)
    assert records.read_sent(tmp_path / "sent.json") == sent
    dlv = records.DeliveryRecord({3: records.ReceivedSender(5, 4, 1, 1, seqs)}, foreign=2)
    records.write_delivery(tmp_path / "delivery.json", dlv)
    assert records.read_delivery(tmp_path / "delivery.json") == dlv
    und = records.UndrainedRecord(1, 4, 0, True, {3: seqs})
    records.write_undrained(tmp_path / "undrained.json", und)
    assert records.read_undrained(tmp_path / "undrained.json") == und


def test_a_worker_record_names_its_process_and_older_ones_read_as_process_0(
    tmp_path: Path,
) -> None:
    rec = records.WorkerRecord(
        "sender-01-p02", "sender", 1, 4, [20, 21, 22, 23], 1, 2, 3, "ok", None, {}, {}, 0, 2
    )
    records.write_worker(tmp_path / "worker.json", rec)
    assert records.read_worker(tmp_path / "worker.json") == rec
    older = rec.to_json()
    del older["process"], older["foreign"]
    write_json(tmp_path / "old.json", {**older, "worker_id": "sender-01"})
    back = records.read_worker(tmp_path / "old.json")
    assert (back.worker_id, back.node, back.process, back.foreign) == ("sender-01", 1, 0, 0)


def test_manifest_and_summary_readers_are_typed_and_strict(tmp_path: Path) -> None:
    write_json(
        tmp_path / "manifest.json",
        {
            "run_id": "r",
            "status": "complete",
            "measure": {"start_ms": 5, "warmup_end_ms": 7},
            "broker": {"name": "nats", "profile": "nats-r3"},
            "drain": {"ended_by": "broker empty"},
        },
    )
    m = records.read_manifest(tmp_path / "manifest.json")
    assert (m.run_id, m.broker, m.measure_start_ms, m.warmup_end_ms, m.measure_end_ms) == (
        "r",
        "nats",
        5,
        7,
        None,
    )
    assert m.drain == {"ended_by": "broker empty"}
    write_json(tmp_path / "summary.json", {"run_id": "r", "status": "partial"})
    with pytest.raises(ArchiveError) as e:
        records.read_summary(tmp_path / "summary.json")
    assert "summary.json: not a summary.json record" in str(e.value) and "\n" not in str(e.value)


def test_a_version_1_record_says_how_to_get_figures(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 1, "run_id": "x"}))
    with pytest.raises(ArchiveError) as e:
        records.read_manifest(tmp_path / "manifest.json")
    text = str(e.value)
    assert "format_version 1" in text and "mqlab run" in text and "\n" not in text
