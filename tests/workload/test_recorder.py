"""Per-interval recording and the receiver node's delivery accounting: first deliveries,
reorders (n - longest increasing run), 64-bit seqs, foreign messages, out-of-range values,
and what senders record (failed calls, unsent messages, lag, last event)."""

from __future__ import annotations

import itertools
import logging
import random
import time
from pathlib import Path

import numpy as np
import pytest

from mqlab import envelope
from mqlab.archive import codecs, hlog, records
from mqlab.workload.recorder import DeliveryTracker, IntervalRecorder, ReceiverStats
from mqlab.workload.schedules import FixedRate
from mqlab.workload.senderstats import SenderStats


def _decoded(pairs: list[tuple[int, int]]) -> np.ndarray:
    pool = envelope.PayloadPool(24)
    msgs = [envelope.encode(s, q, 0, pool.pad(0)) for s, q in pairs]
    return envelope.decode_many(envelope.headers_of(msgs))


def _add(
    t: DeliveryTracker, thread: int, pairs: list[tuple[int, int]], flags: list[bool] | None = None
) -> np.ndarray:
    arr = _decoded(pairs)
    return t.add(thread, arr, np.array(flags or [False] * len(pairs), dtype=bool))


def _out_of_place(seqs: list[int]) -> int:
    """Independent: n - longest strictly increasing subsequence, by O(n^2) dynamic programming."""
    best = [1] * len(seqs)
    for i, x in enumerate(seqs):
        for j in range(i):
            if seqs[j] < x:
                best[i] = max(best[i], best[j] + 1)
    return len(seqs) - max(best, default=0)


def test_one_message_delivered_early_counts_one_reorder_not_ninety_nine() -> None:
    t = DeliveryTracker()
    _add(t, 0, [(1, 99)] + [(1, q) for q in range(99)])
    assert t.senders[1].reordered == 1  # the old rule (below the highest seen) said 99
    rev = DeliveryTracker()
    _add(rev, 0, [(2, q) for q in (4, 3, 2, 1, 0)])
    assert rev.senders[2].reordered == 4


def test_reorders_are_per_receiver_thread_and_stream_across_ticks() -> None:
    rng = random.Random(5)
    seqs = list(range(300))
    for _ in range(40):  # local disorder: swap neighbours here and there
        i = rng.randrange(299)
        seqs[i], seqs[i + 1] = seqs[i + 1], seqs[i]
    t = DeliveryTracker()
    for lo in range(0, 300, 37):  # delivered over several ticks
        _add(t, 0, [(3, q) for q in seqs[lo : lo + 37]])
    assert t.senders[3].reordered == _out_of_place(seqs)
    u = DeliveryTracker()  # two threads, each in order: no reorder across competing consumers
    _add(u, 0, [(3, q) for q in range(0, 100, 2)])
    _add(u, 1, [(3, q) for q in range(1, 100, 2)])
    _add(u, 0, [(3, q) for q in range(100, 110)])
    assert u.senders[3].reordered == 0


def test_random_orders_match_an_independent_lis() -> None:
    rng = random.Random(11)
    for n in (1, 2, 7, 50, 120):
        seqs = rng.sample(range(n * 3), n)
        t = DeliveryTracker()
        for lo in range(0, n, 9):
            _add(t, 0, [(0, q) for q in seqs[lo : lo + 9]])
        assert t.senders[0].reordered == _out_of_place(seqs), seqs


def test_redeliveries_and_duplicates_are_not_first_deliveries_nor_reorders() -> None:
    t = DeliveryTracker()
    first = _add(t, 0, [(1, 0), (1, 1), (1, 2)])
    assert first.tolist() == [True, True, True]
    # 1 again (a duplicate), 3 flagged as redelivered by the broker (first went elsewhere), 4 new
    first = _add(t, 0, [(1, 1), (1, 3), (1, 4)], [False, True, False])
    assert first.tolist() == [False, False, True]
    r = t.senders[1]
    assert r.received == 6 and r.first_received == 4 and r.redelivered == 1
    assert r.reordered == 0 and sorted(r.seqs) == [0, 1, 2, 3, 4]
    dup = _add(t, 1, [(1, 7), (1, 7)])  # the same seq twice in one batch
    assert dup.tolist() == [True, False]
    # what this node got more than once: 1 (again later), 7 (twice in a batch); not 3,
    # which the broker flagged but this node had never seen
    assert sorted(r.again or []) == [1, 7]
    assert records.ReceivedSender.from_json(r.to_json()).again == r.again
    old = {k: v for k, v in r.to_json().items() if k != "again_bitmap"}
    assert records.ReceivedSender.from_json(old).again is None  # from before: unknown


def test_sequence_numbers_are_64_bit() -> None:
    t = DeliveryTracker()
    _add(t, 0, [(1, 5), (1, 2**32 + 5), (1, 2**63 + 1)])
    r = t.senders[1]
    assert r.received == 3 and r.first_received == 3 and len(r.seqs) == 3
    assert 2**32 + 5 in r.seqs and 2**63 + 1 in r.seqs
    assert codecs.decode_bitmap(codecs.encode_bitmap(r.seqs)) == r.seqs


def test_seqs_on_either_side_of_2_to_the_32_are_kept_exactly() -> None:
    t = DeliveryTracker()
    low = [(2, 2**32 - 2), (2, 2**32 - 1)]  # built as a 32-bit bitmap
    assert _add(t, 0, low).tolist() == [True, True]
    assert _add(t, 1, [(2, 2**32), *low[:1]]).tolist() == [True, False]  # the max is 2**32
    assert _add(t, 1, [(2, 2**32 + 1)]).tolist() == [True]
    r = t.senders[2]
    assert sorted(r.seqs) == [2**32 - 2, 2**32 - 1, 2**32, 2**32 + 1]
    assert sorted(r.again or []) == [2**32 - 2]
    assert r.received == 5 and r.first_received == 4 and r.reordered == 0


def test_interleaved_senders_and_threads_match_a_set_by_set_account() -> None:
    """Batches of several senders' runs, over threads, with repeats and flags: each
    figure against plain Python sets and the independent LIS."""
    rng = random.Random(5)
    t = DeliveryTracker()
    seen: dict[int, set[int]] = {}
    received: dict[int, int] = {}
    first_count: dict[int, int] = {}
    order: dict[tuple[int, int], list[int]] = {}
    nxt = dict.fromkeys(range(4), 0)
    for _ in range(60):
        thread = rng.randrange(3)
        pairs, flags = [], []
        for _ in range(rng.randrange(1, 6)):
            sender = rng.randrange(4)
            for _ in range(rng.randrange(1, 12)):
                if nxt[sender] and rng.random() < 0.1:  # one already sent, again
                    q = rng.randrange(nxt[sender])
                else:
                    q, nxt[sender] = nxt[sender], nxt[sender] + 1
                pairs.append((sender, q))
                flags.append(rng.random() < 0.05)
        got = _add(t, thread, pairs, flags).tolist()
        for (sender, q), flag, is_first in zip(pairs, flags, got, strict=True):
            s = seen.setdefault(sender, set())
            want = not flag and q not in s
            assert is_first == want, (sender, q, flag)
            s.add(q)
            received[sender] = received.get(sender, 0) + 1
            if want:
                first_count[sender] = first_count.get(sender, 0) + 1
                order.setdefault((thread, sender), []).append(q)
    for sender, r in t.senders.items():
        assert set(r.seqs) == seen[sender]
        assert r.received == received[sender]
        assert r.first_received == first_count.get(sender, 0)
        lis = sum(_out_of_place(v) for (_, s), v in order.items() if s == sender)
        assert r.reordered == lis


def _hlog_counts(path: Path) -> list[int]:
    lines, _ = hlog.read_lines(str(path))
    assert lines is not None
    return [
        hlog.decode(i.payload).get_total_count()
        for i in hlog.parse_log(str(path), lines)
        if isinstance(i, hlog.Interval)
    ]


def _counts(path: Path) -> list[codecs.CountsRow]:
    rows, problems = codecs.parse_counts(path.read_text())
    assert not problems
    return rows


def test_receiver_interval_counts_foreign_first_and_out_of_range(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec = IntervalRecorder(tmp_path, "receiver", "receiver-00", "run", 1_000_000)
    stats = ReceiverStats()
    rec.receivers.append(stats)
    pool = envelope.PayloadPool(100)
    t_ns = 1_000_000 * 1_000_000
    msgs = [envelope.encode(3, i, t_ns, pool.pad(i)) for i in range(10)]
    bad = b"\x00" * 40  # right length, not an mqlab header
    late = envelope.encode(3, 10, t_ns + 10**10, pool.pad(0))  # stamped after receipt: < 0
    with caplog.at_level(logging.WARNING):
        stats.received([*msgs, b"tiny", bad, late], t_ns + 2_000_000, [0])
        stats.received([bad], t_ns + 3_000_000)
        stats.acked(14)
        rec.tick(1_001_000)
        rec.tick(1_002_000)
    rec.close()
    assert sum("foreign" in r.message for r in caplog.records) == 1  # logged once
    rows = _counts(tmp_path / "counts.csv")
    assert [r.counts["received"] for r in rows] == [14, 0]
    assert rows[0].counts["foreign"] == 3 and rows[0].counts["redelivered"] == 1
    assert rows[0].counts["first_received"] == 10  # seq 0 was flagged redelivered
    assert rows[0].last_ms == 1_000_003 and rows[1].last_ms == 0
    assert rec.delivery.foreign == 3 and rec.delivery.senders[3].received == 11
    assert _hlog_counts(tmp_path / "processing_us.hlog") == [11, 0]
    assert _hlog_counts(tmp_path / "processing_first_us.hlog") == [10, 0]
    assert rec.out_of_range["processing_us"] == {"below_zero": 1, "above_max": 0}


def test_sender_interval_records_failed_unsent_lag_and_last_event(tmp_path: Path) -> None:
    rec = IntervalRecorder(tmp_path, "sender", "sender-00", "run", 5_000_000)
    s = SenderStats(4)
    s.schedule = FixedRate(1000.0, start_ns=0)  # never scheduled anything: far behind
    rec.senders.append(s)
    s.sending(5, 0)
    s.confirmed_batch(0, 5, 1200, wall_ms=5_000_400)
    s.sending(3, 0)
    s.failed(3, 30_000_000)
    s.unsent(np.array([7_000, 8_000, 9_000]))
    rec.tick(5_001_000)
    s.schedule.finish()
    rec.tick(5_002_000)
    rec.close()
    rows = _counts(tmp_path / "counts.csv")
    c = rows[0].counts
    assert (c["sent"], c["confirmed"], c["failed"], c["unsent"]) == (8, 5, 3, 3)
    assert rows[0].last_ms == 5_000_400 and rows[0].lag_ms > 1000 and rows[1].lag_ms == 0
    assert _hlog_counts(tmp_path / "send_call_us.hlog") == [1, 0]
    assert _hlog_counts(tmp_path / "send_msg_us.hlog") == [5 + 3, 0]  # confirmed + unsent
    assert _hlog_counts(tmp_path / "send_failed_us.hlog") == [1, 0]
    rec_sent = s.sent_record()
    assert (rec_sent.sent, rec_sent.confirmed, rec_sent.failed, rec_sent.unsent) == (8, 5, 3, 3)
    assert sorted(rec_sent.confirmed_seqs) == [0, 1, 2, 3, 4]


def test_counters_are_interval_differences() -> None:
    s = SenderStats(1)
    for n in (3, 4):
        s.sending(n, 0)
        s.confirmed_batch(0, n, 10, 1)
    *_arrays, first, _ = s.swap()
    *_arrays, second, _ = s.swap()
    assert first["confirmed"] == 7 and second["confirmed"] == 0
    assert list(itertools.islice(s.confirmed, 4)) == [0, 1, 2, 3]


def test_marks_hold_the_first_seq_handed_to_send_in_each_second() -> None:
    s = SenderStats(2)
    for seq, n, wall_ms in (
        (0, 4, 7_000_100),
        (4, 2, 7_000_900),
        (6, 5, 7_001_000),
        (11, 1, 7_003_999),
    ):
        s.sending(n, 0, seq, wall_ms)
    rec = s.sent_record()
    assert rec.marks == [[7_000_000, 0], [7_001_000, 6], [7_003_000, 11]]
    assert SenderStats(3).sent_record().marks == []  # none sent: no marks, yet known
    from mqlab.archive import records

    again = records.SentSender.from_json(rec.to_json())
    assert again.marks == rec.marks
    old = rec.to_json()
    del old["marks"]  # an archive from before marks
    assert records.SentSender.from_json(old).marks is None


def test_cpu_csv_has_this_process_s_cpu_on_the_counts_intervals(tmp_path: Path) -> None:
    from mqlab import cpu
    from mqlab.archive import codecs

    rec = IntervalRecorder(tmp_path, "sender", "sender-00", "run", 5_000_000)
    before = sum(cpu.self_cpu_us())
    t = time.process_time()
    while time.process_time() - t < 0.2:  # busy in the first interval only
        pass
    rec.tick(5_001_000)
    rec.tick(5_001_500)
    after = sum(cpu.self_cpu_us())
    rec.close()
    rows, problems = codecs.parse_cpu((tmp_path / "cpu.csv").read_text())
    assert problems == []
    assert (
        [(r.start_ms, r.length_ms) for r in rows]
        == [(c.start_ms, c.length_ms) for c in _counts(tmp_path / "counts.csv")]
        == [(5_000_000, 1000), (5_001_000, 500)]
    )
    assert rows[0].cpu_us >= 150_000 and rows[1].cpu_us < rows[0].cpu_us
    assert sum(r.cpu_us for r in rows) <= after - before + 20_000  # no more than was used


def test_headers_received_in_bulk_swap_as_the_same_messages_one_by_one() -> None:
    """ReceiverStats.received_headers (a compiled receive path: headers cut, batches and
    flags as i64 arrays) buffers what received() buffers for the same batches."""
    import array

    msgs = [envelope.encode(4, s, 1_000 + s, b"p" * 10) for s in range(5)]
    one, bulk = ReceiverStats(), ReceiverStats()
    one.received(msgs[:2] + [b"x"], 7_000, [1])
    one.received(msgs[2:], 9_000, [0, 2])
    one.acked(6)
    bulk.received_headers(
        envelope.headers_of(msgs),
        array.array("q", [7_000, 9_000]).tobytes(),
        array.array("q", [2, 3]).tobytes(),
        array.array("q", [1, 2, 4]).tobytes(),
        6,
        1,
    )
    bulk.acked(6)
    a, b = one.swap(), bulk.swap()
    assert a[0] == b[0] and a[4] == b[4]
    for x, y in zip(a[1:4], b[1:4], strict=True):
        assert list(x) == list(y)
    assert b[4]["redelivered"] == 3 and b[4]["foreign"] == 1 and b[4]["received"] == 6
    assert bulk.last_recv_ns == 9_000
