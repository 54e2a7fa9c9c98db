"""Benchmark: what a receiver worker's per-second recording costs per message.

Once a second a receiver worker's ticker turns what its receiver threads got into an
interval (:meth:`mqlab.workload.recorder.IntervalRecorder.tick`): it decodes every
header, tracks deliveries (distinct seqs per sender, first deliveries, reorders per
receiver thread and sender) and records the end-to-end latencies in two histograms. In
the receiver worker of ``bench/clients.py --brokers redis`` that was 13 % of its CPU
(2026-11-29, perf by thread), which the C reference it is compared with does not pay.

This script feeds an :class:`IntervalRecorder` what ``--receivers`` threads would get in
a second at ``--rate`` msgs/s from ``--senders`` senders (each receiver's reads hold the
senders' batches of 10 in turn, as a stream's entries come), ticks it, and prints the
tick's ns per message. The reference, run in the same invocation on the same data, is
the floor any recorder pays: the headers decoded and the latencies computed (numpy),
with no delivery tracking and no histogram; the ratio is the tick over that floor.

    .venv/bin/python bench/recording.py [--rate 100000] [--receivers 8] [--senders 8]
        [--seconds 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import array
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mqlab import envelope  # noqa: E402
from mqlab.workload.recorder import IntervalRecorder, ReceiverStats  # noqa: E402

RUN = 10  # a sender's batch: consecutive seqs
READ = 256  # entries a receiver reads at once


def second_of(
    receivers: int, senders: int, rate: int, nxt: list[int], now_ns: int, rng: np.random.Generator
) -> list[tuple[bytes, bytes, bytes, int]]:
    """Each receiver's second: (headers, receive ns per read, read lengths, messages)."""
    out = []
    for _ in range(receivers):
        per = rate // receivers
        arr = np.zeros(per, dtype=envelope.HEADER_DTYPE)
        arr["magic"], arr["version"] = envelope.MAGIC, envelope.VERSION
        for at in range(0, per, RUN):
            sid, m = int(rng.integers(senders)), min(RUN, per - at)
            arr["sender"][at : at + m] = sid
            arr["seq"][at : at + m] = np.arange(nxt[sid], nxt[sid] + m)
            nxt[sid] += m
        arr["sent_ns"] = now_ns - rng.integers(100_000, 2_000_000, per)
        lens = array.array("q", [min(READ, per - at) for at in range(0, per, READ)])
        stamps = array.array("q", [now_ns] * len(lens))
        out.append((arr.tobytes(), stamps.tobytes(), lens.tobytes(), per))
    return out


def floor(second: list[tuple[bytes, bytes, bytes, int]]) -> None:
    for headers, stamps, lens, _ in second:
        decoded, ok = envelope.split_foreign(headers)
        recv = np.repeat(np.frombuffer(stamps, np.int64), np.frombuffer(lens, np.int64))
        latency = (recv[ok] - decoded["sent_ns"][ok]) // 1000
        assert latency.size == decoded.size


def run(args: argparse.Namespace, out_dir: Path) -> tuple[float, float]:
    """(tick ns per message, floor ns per message) over ``--seconds`` seconds of data."""
    rec = IntervalRecorder(out_dir, "receiver", "r0", "bench", 0)
    rec.receivers = stats = [ReceiverStats() for _ in range(args.receivers)]
    rng = np.random.default_rng(1)
    nxt = [0] * args.senders
    tick_s = floor_s = 0.0
    messages = 0
    try:
        for s in range(args.seconds):
            second = second_of(args.receivers, args.senders, args.rate, nxt, time.time_ns(), rng)
            t = time.perf_counter()
            floor(second)
            floor_s += time.perf_counter() - t
            for st, (headers, stamps, lens, n) in zip(stats, second, strict=True):
                st.received_headers(headers, stamps, lens, b"", n, 0)
                messages += n
            t = time.perf_counter()
            rec.tick((s + 1) * 1000)
            tick_s += time.perf_counter() - t
    finally:
        rec.close()
    first = sum(r.first_received for r in rec.delivery.senders.values())
    if first != messages:
        raise SystemExit(f"recording: {first} first deliveries of {messages} messages")
    return tick_s / messages * 1e9, floor_s / messages * 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=int, default=100_000, help="msgs/s over all receivers")
    p.add_argument("--receivers", type=int, default=8)
    p.add_argument("--senders", type=int, default=8)
    p.add_argument("--seconds", type=int, default=8, help="ticks a repeat")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    print(
        f"recording: {args.receivers} receivers x {args.senders} senders, "
        f"{args.rate:,} msgs/s, {args.seconds} ticks a repeat"
    )
    print(f"{'repeat':>6}  {'tick ns/msg':>11}  {'floor ns/msg':>12}  {'ratio':>5}")
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeat):
            out = Path(tmp) / str(k)
            out.mkdir()
            tick, ref = run(args, out)
            print(f"{k + 1:>6}  {tick:>11.1f}  {ref:>12.1f}  {tick / ref:>5.1f}")


if __name__ == "__main__":
    main()
