"""A receiver corrects end-to-end latencies for the clock offsets of the senders' hosts:
a message stamped by a sender whose clock runs 50 ms ahead is recorded with its true
latency, per sender id, and a corrected latency below 0 is clamped and counted."""

from __future__ import annotations

from pathlib import Path

from mqlab import envelope
from mqlab.archive import hlog
from mqlab.hosts.clocks import corrections_us
from mqlab.workload.recorder import IntervalRecorder, ReceiverStats

T_NS = 1_763_806_925 * 10**9  # true time of the sends
START_MS = T_NS // 10**6 - 500


def _values(path: Path) -> list[list[int]]:
    """Per interval, the distinct values (µs, at the histogram's precision) recorded."""
    lines, _ = hlog.read_lines(str(path))
    assert lines is not None
    out = []
    for item in hlog.parse_log(str(path), lines):
        if isinstance(item, hlog.Interval):
            h = hlog.decode(item.payload)
            out.append(
                [
                    h.get_lowest_equivalent_value(it.value_iterated_to)
                    for it in h.get_recorded_iterator()
                ]
            )
    return out


def _receive(tmp_path: Path, corrections: dict[str, int] | None) -> IntervalRecorder:
    """Receiver host clock = true time; sender id 3 on a host 50 ms ahead, sender id 4 on
    the receiver's own host; both messages take 3 ms. Sender id 5 is on a host 2 ms
    behind, and its message arrives 1 ms after its stamp there (true latency -1 ms is
    impossible: a clock the offsets do not explain)."""
    tmp_path.mkdir(exist_ok=True)
    rec = IntervalRecorder(tmp_path, "receiver", "receiver-00", "run", START_MS)
    if corrections is not None:
        rec.correct_clocks(corrections)
    stats = ReceiverStats()
    rec.receivers.append(stats)
    pool = envelope.PayloadPool(64)
    fast = envelope.encode(3, 0, T_NS + 50_000_000, pool.pad(0))  # stamped 50 ms ahead
    local = envelope.encode(4, 0, T_NS, pool.pad(0))
    stats.received([fast, local], T_NS + 3_000_000)
    odd = envelope.encode(5, 0, T_NS - 2_000_000, pool.pad(0))
    stats.received([odd], T_NS - 3_000_000)
    rec.tick(START_MS + 1000)
    rec.close()
    return rec


def test_a_sender_clock_50_ms_ahead_gives_the_true_latency_after_correction(
    tmp_path: Path,
) -> None:
    offsets_ms = {"recv-host": 0.0, "fast-host": 50.0, "slow-host": -2.0}
    corr = corrections_us(offsets_ms, {3: "fast-host", 4: "recv-host", 5: "slow-host"}, "recv-host")
    assert corr == {"3": -50_000, "4": 0, "5": 2_000}
    raw = _receive(tmp_path / "raw", None)
    # uncorrected: sender 3's message looks 47 ms early (clamped to 0 and counted)
    assert raw.out_of_range["processing_us"]["below_zero"] == 2
    fixed = _receive(tmp_path / "fixed", corr)
    (values,) = _values(tmp_path / "fixed" / "processing_us.hlog")
    assert values[-1] == 3000 and 0 in values  # 3 ms for senders 3 and 4; 0: clamped
    assert fixed.out_of_range["processing_us"]["below_zero"] == 1  # sender 5: -1 ms - 2 ms
    (first,) = _values(tmp_path / "fixed" / "processing_first_us.hlog")
    assert first == values


def test_sender_ids_without_a_correction_are_left_as_they_are(tmp_path: Path) -> None:
    rec = _receive(tmp_path, {"3": -50_000, "99": 1234})  # 4 and 5 not listed: 0
    (values,) = _values(tmp_path / "processing_us.hlog")
    assert values == [0, 3000]
    assert rec.out_of_range["processing_us"]["below_zero"] == 1  # sender 5 uncorrected
