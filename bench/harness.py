"""Throughput of mqlab's own per-message work, with an in-process null driver.

Measures messages per second per core through header encode + header decode +
latency recording (bulk HdrHistogram, all and first deliveries) + delivery
accounting (64-bit bitmaps, first deliveries, reorders), exactly the code the
workers run (SenderStats/ReceiverStats + IntervalRecorder.tick). Prints the
figure and, as the reference measured in the same invocation, the naive way:
one ``record_value`` call per message (hdrh's pure-Python path).

    uv run --frozen python bench/harness.py [--messages N] [--batch B]

Goal (issue: core): >= 1,000,000 messages/s per core on a 2-core CI machine.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import deque
from pathlib import Path

from mqlab import envelope
from mqlab.archive.codecs import new_histogram
from mqlab.workload.recorder import IntervalRecorder, ReceiverStats
from mqlab.workload.senderstats import SenderStats


def mqlab_path(n: int, batch_max: int, size: int, workdir: Path) -> float:
    """Seconds of CPU time to push n messages through sender + null queue + receiver."""
    pool = envelope.PayloadPool(size, seed=1)
    send_rec = IntervalRecorder(workdir, "sender", "sender-00", "bench", 0)
    recv_dir = workdir / "r"
    recv_dir.mkdir()
    recv_rec = IntervalRecorder(recv_dir, "receiver", "receiver-00", "bench", 0)
    sstats = SenderStats(0)
    send_rec.senders.append(sstats)
    rstats = ReceiverStats()
    recv_rec.receivers.append(rstats)
    queue: deque[list[bytes]] = deque()
    rng = random.Random(1)
    seq = 0
    tick_every = 200_000  # one interval per ~0.1-0.2 s of work, like a busy second
    next_tick = tick_every
    t_ms = 1000
    start = time.process_time()
    while seq < n:
        k = min(1 + int(rng.random() * batch_max), n - seq)
        t0 = time.monotonic_ns()
        batch = envelope.encode_batch(0, seq, k, time.time_ns(), pool)
        sstats.sending(k, t0)
        queue.append(batch)  # the null driver: send() is an append
        done = time.monotonic_ns()
        sstats.confirmed_batch(seq, k, (done - t0) // 1000, done // 1_000_000)
        seq += k
        got = queue.popleft()  # receive()
        rstats.received(got, time.time_ns())
        rstats.acked(len(got))
        if seq >= next_tick:
            t_ms += 1000
            send_rec.tick(t_ms)
            recv_rec.tick(t_ms)
            next_tick += tick_every
    send_rec.tick(t_ms + 1000)
    recv_rec.tick(t_ms + 1000)
    elapsed = time.process_time() - start
    send_rec.close()
    recv_rec.close()
    assert recv_rec.totals["received"] == n and len(recv_rec.delivery.senders[0].seqs) == n
    return elapsed


def naive_path(n: int, batch_max: int, size: int) -> float:
    """The reference: same encode/decode, but one hdrh record_value per message."""
    pool = envelope.PayloadPool(size, seed=1)
    h_send, h_proc = new_histogram(), new_histogram()
    seen: set[int] = set()
    rng = random.Random(1)
    seq = 0
    start = time.process_time()
    while seq < n:
        k = min(rng.randint(1, batch_max), n - seq)
        t0 = time.monotonic_ns()
        batch = envelope.encode_batch(0, seq, k, time.time_ns(), pool)
        lat = (time.monotonic_ns() - t0) // 1000
        recv_ns = time.time_ns()
        for m in batch:
            h_send.record_value(max(lat, 1))
            _sender, s, sent_ns = envelope.decode(m)
            h_proc.record_value(max((recv_ns - sent_ns) // 1000, 0))
            seen.add(s)
        seq += k
    return time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=10, help="send batches of random size 1..B")
    ap.add_argument("--size", type=int, default=1024, help="message bytes")
    ap.add_argument("--reference-messages", type=int, default=200_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cpu = mqlab_path(args.messages, args.batch, args.size, Path(d))
    rate = args.messages / cpu
    ref_cpu = naive_path(args.reference_messages, args.batch, args.size)
    ref_rate = args.reference_messages / ref_cpu
    print(
        f"mqlab harness: {rate:,.0f} messages/s per core "
        f"({args.messages:,} messages, batches 1..{args.batch}, {args.size} B, {cpu:.2f} s CPU)"
    )
    print(f"reference (record_value per message): {ref_rate:,.0f} messages/s per core")
    print(
        f"ratio: {rate / ref_rate:.2f}x the reference (goal >= 2.5x); 1,000,000/s per core: "
        f"{'met' if rate >= 1_000_000 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
