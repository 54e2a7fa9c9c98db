"""Per-interval recording and delivery accounting (lost, duplicated, reordered)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from pyroaring import BitMap

from mqlab.results.quick_summary import delivery
from mqlab.workload import envelope
from mqlab.workload.recorder import (
    DeliveryTracker,
    IntervalRecorder,
    ReceiverStats,
    SenderStats,
    decode_bitmap,
    encode_bitmap,
    write_json,
)


def _decoded(pairs: list[tuple[int, int]]) -> np.ndarray:
    pool = envelope.PayloadPool(24)
    msgs = [envelope.encode(s, q, 0, pool.pad(0)) for s, q in pairs]
    return envelope.decode_many(envelope.headers_of(msgs))


def test_tracker_counts_received_distinct_and_reordered() -> None:
    t = DeliveryTracker()
    t.add(0, _decoded([(1, 0), (1, 1), (2, 0), (1, 3), (1, 2)]))  # (1, 2) after 3: reordered
    t.add(0, _decoded([(1, 1), (2, 1)]))  # (1, 1) again: duplicate, and reordered
    t.add(1, _decoded([(1, 0)]))  # another thread: order judged per thread
    r1 = t.senders[1]
    assert r1.received == 6 and sorted(r1.bitmap) == [0, 1, 2, 3] and r1.reordered == 2
    assert t.senders[2].received == 2 and t.senders[2].reordered == 0


def test_bitmap_encoding_round_trips() -> None:
    bm = BitMap(range(0, 100_000, 3))
    assert decode_bitmap(encode_bitmap(bm)) == bm


def test_interval_recorder_writes_logs_counts_and_totals(tmp_path: Path) -> None:
    rec = IntervalRecorder(tmp_path, "receiver", "receiver-00", "run", 1_000_000)
    stats = ReceiverStats()
    rec.receivers.append(stats)
    pool = envelope.PayloadPool(100)
    msgs = [envelope.encode(3, i, 1_000_000 * 1_000_000, pool.pad(i)) for i in range(10)]
    stats.received(msgs, 1_000_000 * 1_000_000 + 2_000_000, redelivered=msgs[:1])  # 2 ms later
    stats.acked(10)
    rec.tick(1_001_000)
    rec.tick(1_002_000)
    rec.close()
    rows = list(csv.DictReader((tmp_path / "counts.csv").open()))
    assert [int(r["received"]) for r in rows] == [10, 0]
    assert [int(r["acked"]) for r in rows] == [10, 0] and rows[0]["redelivered"] == "1"
    assert rec.totals["received"] == 10
    assert rec.delivery.senders[3].redelivered == 1 and rec.delivery.senders[3].received == 10
    lines = [
        x for x in (tmp_path / "processing_us.hlog").read_text().splitlines() if x[0].isdigit()
    ]
    assert len(lines) == 2 and lines[0].startswith("0.000,1.000,2.000,")


def test_sender_stats_swap_and_confirmed_ranges() -> None:
    s = SenderStats(4)
    s.sent(5)
    s.confirmed_batch(0, 5, 1200)
    s.sent(3)
    s.failed(3)
    call, sizes, counts = s.swap()
    assert list(call) == [1200] and list(sizes) == [5]
    assert counts["sent"] == 8 and counts["confirmed"] == 5 and counts["failed"] == 3
    assert sorted(s.confirmed) == [0, 1, 2, 3, 4]
    assert s.swap()[2]["sent"] == 0


def test_run_level_accounting_lost_duplicated_reordered(tmp_path: Path) -> None:
    w = tmp_path / "workers"
    for d in ("sender-00", "receiver-00", "receiver-01"):
        (w / d).mkdir(parents=True)
    write_json(
        w / "sender-00" / "sent.json",
        {
            "format_version": 1,
            "senders": {
                "0": {
                    "sent": 12,
                    "confirmed": 10,
                    "failed": 2,
                    "confirmed_bitmap": encode_bitmap(BitMap(range(10))),
                }
            },
        },
    )
    a = DeliveryTracker()
    a.add(0, _decoded([(0, q) for q in (0, 1, 2, 4, 3)]))  # one reorder
    b = DeliveryTracker()
    b.add(0, _decoded([(0, q) for q in (4, 5, 6, 7)]))  # 4 again: duplicate; 8, 9 lost
    write_json(w / "receiver-00" / "delivery.json", a.to_json())
    write_json(w / "receiver-01" / "delivery.json", b.to_json())
    d = delivery(tmp_path)
    assert d["sent"] == 12 and d["confirmed"] == 10 and d["failed"] == 2
    assert d["received"] == 9 and d["unique_received"] == 8
    assert d["duplicated"] == 1 and d["lost"] == 2 and d["reordered"] == 1
    json.dumps(d)
