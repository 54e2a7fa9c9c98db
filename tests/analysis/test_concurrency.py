"""The closed-loop throughput invariant in the summary (``saturation``'s
``effective_concurrency``, ``senders`` and its ``client_bound`` reason), checked against
Little's law computed here from the raw interval logs with hdrh's own reader: the sum
over the confirmed batches of their latency (count x mean of each ``send_call_us``
interval), over the seconds of the sender's measured period outside the faults."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from mqlab.analysis.catalog import read_run_table
from mqlab.analysis.job import summarize_run
from mqlab.archive import layout
from mqlab.archive.formats import read_json, write_json
from mqlab.archive.hlog import IntervalLogWriter
from tests.fixtures import reference
from tests.fixtures.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run

THREADS = 4
LATENCIES_MS = (2, 5, 9, 3)  # each sender's batches take these in turn
GRACE_MS = 10_000  # after a fault's end, as the lag check (mqlab.analysis.saturation)


def closed_loop(tmp_path: Path, sender_nodes: int = 1, **spec: Any) -> SyntheticRun:
    return write_synthetic_run(
        tmp_path,
        SyntheticSpec(
            sender_nodes=sender_nodes,
            sender_threads=THREADS,
            extra={"mode": "closed_loop"},
            **spec,
        ),
    )


def edges(run: SyntheticRun, wid: str) -> list[tuple[int, int]]:
    rows = reference.counts(run.run_dir, "sender")  # every sender shares its edges
    return sorted({(r["start_ms"], r["start_ms"] + r["length_ms"]) for r in rows})


def write_batches(
    run: SyntheticRun,
    wid: str,
    gap_ms: int = 0,
    stall: tuple[int, int] | None = None,
    none: bool = False,
) -> None:
    """Replace a sender's send_call_us.hlog with a closed loop: each of THREADS senders
    sends a batch, waits for it (LATENCIES_MS in turn; a batch started before a stall's
    end is confirmed at its end, no sooner), waits ``gap_ms`` and sends the next; each
    batch's latency goes to the interval of its confirmation."""
    spans = edges(run, wid)
    first, last = spans[0][0], spans[-1][1]
    hists = [reference.empty() for _ in spans]
    starts = [s for s, _e in spans]
    for t in range(THREADS):
        now, k = run.go_ms + t, t
        while not none:
            lat = LATENCIES_MS[k % len(LATENCIES_MS)]
            done = now + lat
            if stall and now < stall[1] and done > stall[0]:
                done = max(done, stall[1])
            if done >= last:
                break
            i = max(j for j, s in enumerate(starts) if s <= done)
            hists[i].record_value((done - now) * 1000)
            now, k = done + gap_ms, k + 1
    out = io.StringIO()
    w = IntervalLogWriter(out, first)
    for (s, e), h in zip(spans, hists, strict=True):
        w.write(h, s, e)
    layout.log_file(run.run_dir / layout.WORKERS / wid, "send_call_us").write_text(out.getvalue())


def expected(run: SyntheticRun, faults: tuple[tuple[int, int], ...] = ()) -> float | None:
    return littles_law(run.run_dir, run.warmup_end_ms, faults)


def littles_law(
    run_dir: Path, warmup_end_ms: int, faults: tuple[tuple[int, int], ...] = ()
) -> float | None:
    """Little's law from the raw logs: sum of count x mean of every sender interval that
    starts at or after the warm-up end, in a second of the sender's measured period and
    not of a fault (from a second before its start to GRACE_MS after its end), over
    the wall time those intervals cover, clipped to the period."""
    p = reference.period(run_dir, "sender", warmup_end_ms)
    busy_us, batches = 0.0, 0
    spans: list[tuple[int, int]] = []
    for path in sorted(run_dir.glob("workers/sender-*/send_call_us.hlog")):
        for start, end, h in reference.intervals(path):
            second = start - start % 1000
            if start < warmup_end_ms or not p.start_ms - 999 <= second < p.end_ms:
                continue
            if any(a - 1000 < second <= b + GRACE_MS for a, b in faults):
                continue
            n = h.get_total_count()
            busy_us += n * h.get_mean_value()
            batches += n
            spans.append((max(start, p.start_ms), min(end, p.end_ms)))
    if not batches:
        return None
    # the wall time those intervals cover, clipped to the period: several senders'
    # intervals run side by side, so their union, not their sum
    ms, reach = 0, None
    for a, b in sorted(spans):
        if reach is None or a > reach:
            ms, reach = ms + max(0, b - a), b
        elif b > reach:
            ms, reach = ms + b - reach, b
    return busy_us / (ms * 1000)


def section(run: SyntheticRun) -> dict[str, Any]:
    summary = summarize_run(run.run_dir)
    assert read_json(run.run_dir / layout.SUMMARY)["saturation"] == summary["saturation"]
    return summary["saturation"]


def test_senders_that_wait_only_on_their_batches_keep_all_of_them_in_flight(
    tmp_path: Path,
) -> None:
    run = closed_loop(tmp_path)
    write_batches(run, "sender-00")
    s = section(run)
    want = expected(run)
    assert want is not None and want == pytest.approx(THREADS, rel=0.03)  # by construction
    assert s["effective_concurrency"] == pytest.approx(want, abs=0.006)  # rounded to 2
    assert s["senders"] == THREADS
    assert not any("Little" in why for why in s["client_bound_why"])
    [row] = read_run_table(run.run_dir, "runs").to_pylist()
    assert (row["effective_concurrency"], row["senders"]) == (s["effective_concurrency"], THREADS)


def test_senders_that_idle_between_batches_mark_the_run_client_bound(tmp_path: Path) -> None:
    run = closed_loop(tmp_path)
    write_batches(run, "sender-00", gap_ms=5)  # mean batch 4.75 ms, then 5 ms idle
    s = section(run)
    want = expected(run)
    assert want is not None and want == pytest.approx(THREADS * 4.75 / 9.75, rel=0.03)
    assert s["effective_concurrency"] == pytest.approx(want, abs=0.006)
    assert s["client_bound"] is True
    assert (
        f"closed-loop senders kept {s['effective_concurrency']:.2f} of {THREADS} batches in "
        "flight (Little's law)"
    ) in s["client_bound_why"]


def test_a_stall_the_senders_wait_out_keeps_them_all_in_flight(tmp_path: Path) -> None:
    run = closed_loop(tmp_path)
    stall = (run.warmup_end_ms + 4200, run.warmup_end_ms + 7500)  # 3.3 s, over a tick
    write_batches(run, "sender-00", stall=stall)
    s = section(run)
    want = expected(run)
    assert want is not None and want == pytest.approx(THREADS, rel=0.03)
    assert s["effective_concurrency"] == pytest.approx(want, abs=0.006)
    assert not any("Little" in why for why in s["client_bound_why"])


def test_the_seconds_of_a_fault_are_left_out(tmp_path: Path) -> None:
    run = closed_loop(tmp_path)
    write_batches(run, "sender-00", gap_ms=5)  # client-bound, unless...
    # ... every measured second is a fault's (killed at the warm-up end, 10 s of grace)
    at = run.warmup_end_ms
    manifest = read_json(run.run_dir / layout.MANIFEST)
    manifest["faults"] = [
        {"action": "kill_node", "node": 1, "at_ms": at},
        {"action": "restart_node", "node": 1, "at_ms": at + 25_000},
    ]
    write_json(run.run_dir / layout.MANIFEST, manifest)
    s = section(run)
    assert expected(run, ((at, at + 25_000),)) is None  # nothing left to judge
    assert s["effective_concurrency"] is None
    assert not any("Little" in why for why in s["client_bound_why"])
    # a fault over the first 10 s only: the rest is judged, and still client-bound
    manifest["faults"][1]["at_ms"] = at + 1000
    write_json(run.run_dir / layout.MANIFEST, manifest)
    s = section(run)
    want = expected(run, ((at, at + 1000),))
    assert want is not None and s["effective_concurrency"] == pytest.approx(want, abs=0.006)
    assert s["client_bound"] is True


def test_two_sender_nodes_add_up(tmp_path: Path) -> None:
    run = closed_loop(tmp_path, sender_nodes=2)
    write_batches(run, "sender-00")
    write_batches(run, "sender-01", gap_ms=5)
    s = section(run)
    want = expected(run)
    assert want is not None and want == pytest.approx(THREADS * (1 + 4.75 / 9.75), rel=0.03)
    assert s["effective_concurrency"] == pytest.approx(want, abs=0.006)
    assert s["senders"] == 2 * THREADS and s["client_bound"] is True  # 5.9 < 0.8 x 8


def test_a_missing_send_latency_log_leaves_the_figure_unknown(tmp_path: Path) -> None:
    run = closed_loop(tmp_path, sender_nodes=2)
    write_batches(run, "sender-00")
    write_batches(run, "sender-01")
    layout.log_file(run.run_dir / layout.WORKERS / "sender-01", "send_call_us").unlink()
    summary = summarize_run(run.run_dir)
    s = summary["saturation"]
    # half the senders' batches would read as 4 of 8 in flight: not a figure to flag on
    assert s["effective_concurrency"] is None and s["senders"] == 2 * THREADS
    assert not any("Little" in why for why in s["client_bound_why"])
    assert summary["problems"]["missing_files"] == 1


def test_no_batch_confirmed_gives_no_figure(tmp_path: Path) -> None:
    run = closed_loop(tmp_path)
    write_batches(run, "sender-00", none=True)
    s = section(run)
    assert expected(run) is None
    assert s["effective_concurrency"] is None
    assert not any("Little" in why for why in s["client_bound_why"])


def test_a_fixed_rate_run_has_no_figure(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path, SyntheticSpec(sender_threads=THREADS))
    write_batches(run, "sender-00", gap_ms=50)  # idle between batches by design
    s = section(run)
    assert s["effective_concurrency"] is None and s["senders"] == THREADS
    assert not any("Little" in why for why in s["client_bound_why"])
