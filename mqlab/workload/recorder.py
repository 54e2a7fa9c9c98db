"""Per-thread measurement buffers, the per-second interval ticker, and delivery accounting.

Worker threads append to their own :class:`SenderStats` / :class:`ReceiverStats`
(an uncontended lock per batch). Once per wall-clock second the worker's
:class:`IntervalRecorder` swaps every thread's buffers and turns them, in bulk,
into HdrHistogram interval-log lines, a ``counts.csv`` row and delivery records.
"""

from __future__ import annotations

import array
import base64
import csv
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
from pyroaring import BitMap

from mqlab.workload import envelope
from mqlab.workload.histograms import BulkHistogram, IntervalLogWriter

FORMAT_VERSION = 1
COUNT_FIELDS = ("sent", "confirmed", "failed", "received", "acked", "redelivered")
COUNT_COLUMNS = ("start_ms", "length_ms", *COUNT_FIELDS)  # the header of counts.csv


class SenderStats:
    """What one sender thread measured (plus its confirmed seqs).

    Counters only ever grow and are written by the owning thread alone; the ticker
    reads them without a lock and takes differences. Latency buffers are swapped
    under an (uncontended) lock.
    """

    def __init__(self, sender_id: int):
        self.sender_id = sender_id
        self.lock = threading.Lock()
        self.call_us = array.array("q")
        self.batch_sizes = array.array("q")
        self.confirmed = BitMap()  # touched only by the owning thread until the end
        self.sent_total = 0
        self.confirmed_total = 0
        self.failed_total = 0
        self._seen = (0, 0, 0)

    def sent(self, n: int) -> None:
        self.sent_total += n

    def confirmed_batch(self, first_seq: int, n: int, call_us: int) -> None:
        self.confirmed.add_range(first_seq, first_seq + n)
        with self.lock:
            self.call_us.append(call_us)
            self.batch_sizes.append(n)
        self.confirmed_total += n

    def failed(self, n: int) -> None:
        self.failed_total += n

    def swap(self) -> tuple[array.array, array.array, dict[str, int]]:
        with self.lock:
            out = (self.call_us, self.batch_sizes)
            self.call_us = array.array("q")
            self.batch_sizes = array.array("q")
        now = (self.sent_total, self.confirmed_total, self.failed_total)
        prev, self._seen = self._seen, now
        counts = dict.fromkeys(COUNT_FIELDS, 0)
        counts["sent"], counts["confirmed"], counts["failed"] = (
            a - b for a, b in zip(now, prev, strict=True)
        )
        return out[0], out[1], counts


class ReceiverStats:
    """What one receiver thread got: raw headers and batch times (swapped under a lock),
    and counters that only grow (read by the ticker without a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.headers = bytearray()
        self.recv_ns = array.array("q")
        self.batch_lens = array.array("q")
        self.redelivered_headers = bytearray()
        self.redelivered_out = bytearray()
        self.received_total = 0
        self.acked_total = 0
        self.redelivered_total = 0
        self.bad_messages = 0
        self._seen = (0, 0, 0)

    def received(
        self, messages: list[bytes], recv_ns: int, redelivered: list[bytes] | None = None
    ) -> None:
        """A received batch; ``redelivered``: the messages the broker flagged as redelivered."""
        hdr = envelope.headers_of(messages)
        n = len(messages)
        if len(hdr) != n * envelope.HEADER_BYTES:
            good = [m for m in messages if len(m) >= envelope.HEADER_BYTES]
            self.bad_messages += n - len(good)
            hdr, n = envelope.headers_of(good), len(good)
            redelivered = [m for m in redelivered or () if len(m) >= envelope.HEADER_BYTES]
        with self.lock:
            self.headers += hdr
            self.recv_ns.append(recv_ns)
            self.batch_lens.append(n)
            if redelivered:
                self.redelivered_headers += envelope.headers_of(redelivered)
        self.received_total += n
        if redelivered:
            self.redelivered_total += len(redelivered)

    def acked(self, n: int) -> None:
        self.acked_total += n

    def swap(self) -> tuple[bytearray, array.array, array.array, dict[str, int]]:
        with self.lock:
            out = (self.headers, self.recv_ns, self.batch_lens)
            self.headers = bytearray()
            self.recv_ns = array.array("q")
            self.batch_lens = array.array("q")
            self.redelivered_out, self.redelivered_headers = self.redelivered_headers, bytearray()
        now = (self.received_total, self.acked_total, self.redelivered_total)
        prev, self._seen = self._seen, now
        counts = dict.fromkeys(COUNT_FIELDS, 0)
        counts["received"], counts["acked"], counts["redelivered"] = (
            a - b for a, b in zip(now, prev, strict=True)
        )
        return out[0], out[1], out[2], counts


@dataclass
class SenderDelivery:
    received: int = 0
    redelivered: int = 0
    reordered: int = 0
    bitmap: BitMap = field(default_factory=BitMap)


class DeliveryTracker:
    """Per-sender record of what one receiver node saw (distinct seqs, counts, reorders)."""

    def __init__(self) -> None:
        self.senders: dict[int, SenderDelivery] = {}
        # highest seq seen per (receiver thread, sender): order is judged per consumer
        self._max_seen: dict[tuple[int, int], int] = {}
        self.bad_headers = 0

    def add(self, thread: int, decoded: np.ndarray) -> None:
        if decoded.size == 0:
            return
        senders = decoded["sender"]
        seqs = decoded["seq"]
        order = np.argsort(senders, kind="stable")
        s_sorted = senders[order]
        q_sorted = seqs[order]
        uniq, starts = np.unique(s_sorted, return_index=True)
        bounds = list(starts[1:]) + [s_sorted.size]
        for sid, lo, hi in zip(uniq.tolist(), starts.tolist(), bounds, strict=True):
            q = q_sorted[lo:hi]
            rec = self.senders.get(sid)
            if rec is None:
                rec = self.senders[sid] = SenderDelivery()
            rec.received += int(q.size)
            rec.bitmap.update(array.array("I", q.astype(np.uint32).tobytes()))
            key = (thread, sid)
            prev = self._max_seen.get(key, -1)
            running = np.maximum.accumulate(q.astype(np.int64))
            before = np.empty_like(running)
            before[0] = prev
            before[1:] = np.maximum(running[:-1], prev)
            rec.reordered += int(np.count_nonzero(q.astype(np.int64) < before))
            self._max_seen[key] = max(prev, int(running[-1]))

    def add_redelivered(self, decoded: np.ndarray) -> None:
        senders, counts = np.unique(decoded["sender"], return_counts=True)
        for sid, n in zip(senders.tolist(), counts.tolist(), strict=True):
            rec = self.senders.get(sid)
            if rec is None:
                rec = self.senders[sid] = SenderDelivery()
            rec.redelivered += n

    def to_json(self) -> dict[str, object]:
        out = {}
        for sid, rec in sorted(self.senders.items()):
            rec.bitmap.run_optimize()
            out[str(sid)] = {
                "received": rec.received,
                "redelivered": rec.redelivered,
                "reordered": rec.reordered,
                "bitmap": base64.b64encode(rec.bitmap.serialize()).decode("ascii"),
            }
        return {"format_version": FORMAT_VERSION, "senders": out}


def encode_bitmap(bm: BitMap) -> str:
    bm.run_optimize()
    return base64.b64encode(bm.serialize()).decode("ascii")


def decode_bitmap(text: str) -> BitMap:
    return BitMap.deserialize(base64.b64decode(text))


class IntervalRecorder:
    """Turns the threads' buffers into interval logs and counts, once per second."""

    def __init__(self, out_dir: Path, role: str, worker_id: str, run_id: str, start_ms: int):
        self.out_dir = out_dir
        self.role = role
        self.start_ms = start_ms
        self.interval_start_ms = start_ms
        self._files: list[TextIO] = []
        self._logs: dict[str, tuple[BulkHistogram, IntervalLogWriter]] = {}
        metrics = ("send_call_us", "send_msg_us") if role == "sender" else ("processing_us",)
        for metric in metrics:
            f = open(out_dir / f"{metric}.hlog", "w", encoding="ascii")  # noqa: SIM115
            self._files.append(f)
            comment = f"mqlab metric={metric} unit=us worker={worker_id} run={run_id}"
            self._logs[metric] = (BulkHistogram(), IntervalLogWriter(f, start_ms, comment))
        self._counts_file = open(out_dir / "counts.csv", "w", newline="", encoding="ascii")  # noqa: SIM115
        self._files.append(self._counts_file)
        self._counts = csv.writer(self._counts_file)
        self._counts.writerow(COUNT_COLUMNS)
        self.senders: list[SenderStats] = []
        self.receivers: list[ReceiverStats] = []
        self.delivery = DeliveryTracker()
        self.totals = dict.fromkeys(COUNT_FIELDS, 0)
        self.clamped = 0
        self.lock = threading.Lock()

    def tick(self, end_ms: int) -> None:
        """Close the interval [interval_start_ms, end_ms) and write it out."""
        with self.lock:
            start_ms = self.interval_start_ms
            counts = dict.fromkeys(COUNT_FIELDS, 0)
            if self.role == "sender":
                self._tick_senders(counts)
            else:
                self._tick_receivers(counts)
            for hist, writer in self._logs.values():
                writer.write(hist.hist, start_ms, end_ms)
                self.clamped += hist.clamped
                hist.clamped = 0
                hist.reset()
            self._counts.writerow((start_ms, end_ms - start_ms, *(counts[k] for k in COUNT_FIELDS)))
            self._counts_file.flush()
            for k, v in counts.items():
                self.totals[k] += v
            self.interval_start_ms = end_ms

    def _tick_senders(self, counts: dict[str, int]) -> None:
        calls: list[np.ndarray] = []
        sizes: list[np.ndarray] = []
        for stats in self.senders:
            call_us, batch_sizes, c = stats.swap()
            calls.append(np.frombuffer(call_us, dtype=np.int64))
            sizes.append(np.frombuffer(batch_sizes, dtype=np.int64))
            for k, v in c.items():
                counts[k] += v
        if calls:
            call = np.concatenate(calls)
            size = np.concatenate(sizes)
            self._logs["send_call_us"][0].record(call)
            self._logs["send_msg_us"][0].record(call, size)

    def _tick_receivers(self, counts: dict[str, int]) -> None:
        lat: list[np.ndarray] = []
        for thread, stats in enumerate(self.receivers):
            headers, recv_ns, lens, c = stats.swap()
            for k, v in c.items():
                counts[k] += v
            if not lens:
                continue
            decoded = envelope.decode_many(bytes(headers))
            recv = np.repeat(
                np.frombuffer(recv_ns, dtype=np.int64), np.frombuffer(lens, dtype=np.int64)
            )
            lat.append((recv - decoded["sent_ns"]) // 1000)
            self.delivery.add(thread, decoded)
            if stats.redelivered_out:
                self.delivery.add_redelivered(envelope.decode_many(bytes(stats.redelivered_out)))
        if lat:
            self._logs["processing_us"][0].record(np.concatenate(lat))

    def close(self) -> None:
        for f in self._files:
            f.close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def write_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
