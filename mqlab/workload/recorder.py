"""Per-thread measurement buffers, the per-second interval ticker, and delivery accounting.

Worker threads append to their own :class:`SenderStats` / :class:`ReceiverStats`
(an uncontended lock per batch). Once per wall-clock second the worker's
:class:`IntervalRecorder` swaps every thread's buffers and turns them, in bulk,
into HdrHistogram interval-log lines, a ``counts.csv`` row and delivery records.
The file formats are the archive's (:mod:`mqlab.archive`).

End-to-end latency is the receive stamp (this host's wall clock) minus the header's
stamp (the sender host's wall clock), minus the clock correction of that sender id
(:meth:`IntervalRecorder.correct_clocks`: this host's measured clock offset minus the
sender host's), so that clocks of different hosts do not show up as latency.
"""

from __future__ import annotations

import array
import logging
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
from pyroaring import BitMap, BitMap64

from mqlab import clock, cpu, envelope
from mqlab.archive import codecs, layout
from mqlab.archive.codecs import COUNT_FIELDS
from mqlab.archive.hlog import IntervalLogWriter
from mqlab.archive.records import DeliveryRecord, ReceivedSender
from mqlab.workload.histograms import BulkHistogram
from mqlab.workload.senderstats import SenderStats

LOG = logging.getLogger(__name__)
_LOW_ONLY = struct.pack("<QI", 1, 0)  # Roaring64's portable format: one 32-bit bitmap, high 0


def _ms(wall_ns: int) -> int:
    return wall_ns // 1_000_000


class ReceiverStats:
    """What one receiver thread got: raw headers, which of them the broker flagged as
    redelivered and batch times (swapped under a lock), and counters that only grow (read
    without a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.headers = bytearray()
        self.flagged = array.array("q")  # indices (into headers) of flagged redeliveries
        self.recv_ns = array.array("q")
        self.batch_lens = array.array("q")
        self._buffered = 0  # messages in headers since the last swap
        self.received_total = 0
        self.acked_total = 0
        self.redelivered_total = 0
        self.short_total = 0  # messages shorter than a header (foreign)
        self.last_recv_ns = 0
        self._seen = (0, 0, 0, 0)
        # receivers in lanes (they record what a compiled call received once it returns,
        # at the interval's cut): the wall ms before which every batch received is
        # recorded; None: not in lanes, the ticker does not wait
        self.watermark_ms: int | None = None

    def received(
        self, messages: list[bytes], recv_ns: int, redelivered: list[int] | None = None
    ) -> None:
        """A received batch; ``redelivered``: indices of the messages the broker flagged as
        redelivered (None: none)."""
        hdr = envelope.headers_of(messages)
        total = n = len(messages)
        if len(hdr) != n * envelope.HEADER_BYTES:
            keep = [i for i, m in enumerate(messages) if len(m) >= envelope.HEADER_BYTES]
            self.short_total += n - len(keep)
            hdr = envelope.headers_of([messages[i] for i in keep])
            if redelivered:
                where = {old: new for new, old in enumerate(keep)}
                redelivered = [where[i] for i in redelivered if i in where]
            n = len(keep)
        with self.lock:
            base = self._buffered
            self.headers += hdr
            if redelivered:
                self.flagged.extend(base + i for i in redelivered)
            self.recv_ns.append(recv_ns)
            self.batch_lens.append(n)
            self._buffered = base + n
        self.last_recv_ns = recv_ns
        self.received_total += total  # every message receive() returned, foreign ones too
        if redelivered:
            self.redelivered_total += len(redelivered)

    def received_headers(
        self,
        headers: bytes,
        recv_ns: bytes,
        lens: bytes,
        flagged: bytes,
        received: int,
        short: int,
    ) -> None:
        """Batches received in bulk (a compiled receive path): their messages' headers
        already cut (``short`` messages had none), each batch's receive time and length,
        and the indices (into ``headers``) of those flagged redelivered, all as native i64
        arrays (bytes)."""
        if not received:
            return
        at = array.array("q", flagged)
        stamps = array.array("q", recv_ns)
        with self.lock:
            base = self._buffered
            self.headers += headers
            if at:
                self.flagged.extend(base + i for i in at)
            self.recv_ns.extend(stamps)
            self.batch_lens.frombytes(lens)
            self._buffered = base + len(headers) // envelope.HEADER_BYTES
        if stamps:  # a receiver's lanes' batches come one lane after the other
            self.last_recv_ns = max(self.last_recv_ns, max(stamps))
        self.received_total += received
        self.short_total += short
        self.redelivered_total += len(at)

    def acked(self, n: int) -> None:
        self.acked_total += n

    def swap(self) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
        """(headers, flagged mask, receive ns per batch, batch lengths, counter deltas)."""
        with self.lock:
            headers, flagged = bytes(self.headers), self.flagged
            recv_ns, lens, n = self.recv_ns, self.batch_lens, self._buffered
            self.headers, self.flagged = bytearray(), array.array("q")
            self.recv_ns, self.batch_lens, self._buffered = array.array("q"), array.array("q"), 0
        now = (self.received_total, self.acked_total, self.redelivered_total, self.short_total)
        prev, self._seen = self._seen, now
        counts = dict.fromkeys(COUNT_FIELDS, 0)
        for k, a, b in zip(("received", "acked", "redelivered", "foreign"), now, prev, strict=True):
            counts[k] = a - b
        mask = np.zeros(n, dtype=bool)
        if flagged:
            mask[np.frombuffer(flagged, dtype=np.int64)] = True
        return (
            headers,
            mask,
            np.frombuffer(recv_ns, dtype=np.int64),
            np.frombuffer(lens, dtype=np.int64),
            counts,
        )


@dataclass
class _Order:
    """Patience-sorting tails of one (receiver thread, sender) stream of first deliveries:
    ``len(tails)`` is the length of the longest increasing run of seqs seen so far."""

    tails: BitMap64 = field(default_factory=BitMap64)
    first: int = 0

    def add(self, seqs: np.ndarray, as_set: BitMap64 | None = None) -> int:
        """Add first deliveries in delivery order; return how many more are out of place.
        ``as_set``: the same seqs as a bitmap, when the caller has one (saves building it)."""
        if seqs.size == 0:
            return 0
        tails = self.tails
        before = len(tails)
        self.first += int(seqs.size)
        increasing = seqs.size == 1 or bool(np.all(seqs[1:] > seqs[:-1]))
        if increasing and (not tails or int(seqs[0]) > tails.max()):
            tails |= as_set if as_set is not None else _bitmap(seqs)
        else:
            for x in seqs.tolist():
                if tails and x <= tails.max():
                    tails.discard(tails.next_set_bit(x))  # the smallest tail >= x
                tails.add(x)
        return int(seqs.size) - (len(tails) - before)


def _bitmap(seqs: np.ndarray) -> BitMap64:
    """``seqs`` as a bitmap. Below 2**32 (every run's seqs in practice) it is built as a
    32-bit bitmap and turned into a 64-bit one through Roaring's portable format (a
    count of 32-bit bitmaps, each one's upper 32 bits, then it): adding the values to a
    64-bit bitmap one by one costs twice as much."""
    if seqs.size and int(seqs.max()) < 1 << 32:
        low = BitMap(array.array("I", seqs.astype(np.uint32).tobytes()))
        return BitMap64.deserialize(_LOW_ONLY + low.serialize())
    return BitMap64(array.array("Q", seqs.astype(np.uint64, copy=False).tobytes()))


def by_sender(senders: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(sender id, the indices of its messages in delivery order) for each distinct sender
    id, in ascending id order."""
    if senders.size == 0:
        return []
    # a stable sort keeps delivery order within a sender (16-bit keys sort by radix)
    key = senders.astype(np.uint16) if int(senders.max()) < 1 << 16 else senders
    order = np.argsort(key, kind="stable")
    ids = senders[order]
    cuts = (np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist()
    bounds = [0, *cuts, int(ids.size)]
    return [(int(ids[lo]), order[lo:hi]) for lo, hi in zip(bounds, bounds[1:], strict=False)]


class DeliveryTracker:
    """Per-sender record of what one receiver node saw: distinct seqs, first deliveries,
    redeliveries, and reorders per (receiver thread, sender)."""

    def __init__(self) -> None:
        self.senders: dict[int, ReceivedSender] = {}
        self._order: dict[tuple[int, int], _Order] = {}
        self.foreign = 0

    def add(self, thread: int, decoded: np.ndarray, flagged: np.ndarray) -> np.ndarray:
        """Record valid decoded headers (delivery order) and their redelivery flags; return
        the mask of first deliveries (a seq this node had not seen, not flagged again)."""
        first = np.zeros(decoded.size, dtype=bool)
        if decoded.size == 0:
            return first
        seqs = decoded["seq"]
        for sid, idx in by_sender(decoded["sender"]):
            q = seqs[idx]
            f = flagged[idx]
            rec = self.senders.get(sid)
            if rec is None:
                rec = self.senders[sid] = ReceivedSender()
            batch = _bitmap(q)
            flags = int(np.count_nonzero(f))
            rec.received += int(q.size)
            rec.redelivered += flags
            fresh = len(batch) == q.size and not flags and rec.seqs.isdisjoint(batch)
            if fresh:  # the common case: every one a first delivery
                mask = np.ones(q.size, dtype=bool)
            else:
                mask = ~f
                once = np.zeros(q.size, dtype=bool)
                once[np.unique(q, return_index=True)[1]] = True  # first occurrence in q
                mask &= once
                seen_before = batch & rec.seqs
                if seen_before:
                    mask &= ~np.isin(q, np.array(seen_before.to_array(), dtype=np.uint64))
                # a seq delivered here more than once: again in this batch, or seen before
                again = _bitmap(q[~once])
                again |= seen_before
                if again:
                    rec.again = again if rec.again is None else rec.again | again
            rec.seqs |= batch
            key = (thread, sid)
            track = self._order.get(key)
            if track is None:
                track = self._order[key] = _Order()
            if fresh:
                rec.first_received += int(q.size)
                rec.reordered += track.add(q, batch)
                first[idx] = True
            else:
                rec.first_received += int(np.count_nonzero(mask))
                rec.reordered += track.add(q[mask])
                first[idx[mask]] = True
        return first

    def record(self) -> DeliveryRecord:
        return DeliveryRecord(dict(sorted(self.senders.items())), self.foreign)


class IntervalRecorder:
    """Turns the threads' buffers into interval logs and counts, once per second."""

    def __init__(self, out_dir: Path, role: str, worker_id: str, run_id: str, start_ms: int):
        self.out_dir = out_dir
        self.role = role
        self.start_ms = start_ms
        self.interval_start_ms = start_ms
        self._files: list[TextIO] = []
        self.hists: dict[str, BulkHistogram] = {}
        self._writers: dict[str, IntervalLogWriter] = {}
        for metric in layout.LOGS[role]:
            f = open(layout.log_file(out_dir, metric), "w", encoding="ascii")  # noqa: SIM115
            self._files.append(f)
            comment = f"mqlab metric={metric} unit=us worker={worker_id} run={run_id}"
            self.hists[metric] = BulkHistogram()
            self._writers[metric] = IntervalLogWriter(f, start_ms, comment)
        self._counts_file = open(out_dir / layout.COUNTS, "w", encoding="ascii")  # noqa: SIM115
        self._files.append(self._counts_file)
        self._counts_file.write(codecs.counts_header())
        # this process's CPU per interval (the same boundaries as counts.csv)
        self._cpu_file = open(out_dir / layout.CPU, "w", encoding="ascii")  # noqa: SIM115
        self._files.append(self._cpu_file)
        self._cpu_file.write(codecs.cpu_header())
        self._cpu_seen = cpu.self_cpu_us()
        self.senders: list[SenderStats] = []
        self.receivers: list[ReceiverStats] = []
        self.delivery = DeliveryTracker()
        self.totals = dict.fromkeys(COUNT_FIELDS, 0)
        self.out_of_range = {m: {"below_zero": 0, "above_max": 0} for m in self.hists}
        self.lock = threading.Lock()
        self._foreign_logged = False
        self._corr_ids = np.empty(0, np.uint32)  # sender ids with a clock correction, sorted
        self._corr_us = np.empty(0, np.int64)  # their corrections (µs to subtract)

    def correct_clocks(self, corrections_us: Mapping[str, int]) -> None:
        """Receivers: sender id (a string, as the worker spec has it) -> µs to subtract
        from that sender's end-to-end latencies (this host's clock offset minus the sender
        host's, :func:`mqlab.hosts.clocks.corrections_us`); a sender id not listed: 0.
        A corrected latency below 0 is recorded as 0 and counted (``below_zero``)."""
        pairs = sorted((int(k), int(v)) for k, v in corrections_us.items() if int(v))
        self._corr_ids = np.array([k for k, _ in pairs], dtype=np.uint32)
        self._corr_us = np.array([v for _, v in pairs], dtype=np.int64)

    def _correction_us(self, senders: np.ndarray) -> np.ndarray | None:
        """The clock correction of each message's sender id (None: no corrections)."""
        ids = self._corr_ids
        if ids.size == 0 or senders.size == 0:
            return None
        pos = np.minimum(np.searchsorted(ids, senders), ids.size - 1)
        return np.where(ids[pos] == senders, self._corr_us[pos], 0)

    def tick(self, end_ms: int) -> None:
        """Close the interval [interval_start_ms, end_ms) and write it out (an ``end_ms``
        before the interval's start, from a racing tick, changes nothing)."""
        with self.lock:
            start_ms = self.interval_start_ms
            if end_ms < start_ms:
                return
            counts = dict.fromkeys(COUNT_FIELDS, 0)
            if self.role == "sender":
                last_ms, lag_ms = self._tick_senders(counts, end_ms)
            else:
                last_ms, lag_ms = self._tick_receivers(counts), 0
            for metric, hist in self.hists.items():
                self._writers[metric].write(hist.hist, start_ms, end_ms)
                self.out_of_range[metric]["below_zero"] += hist.below_zero
                self.out_of_range[metric]["above_max"] += hist.above_max
                hist.below_zero = hist.above_max = 0
                hist.reset()
            self._counts_file.write(
                codecs.counts_line(start_ms, end_ms - start_ms, last_ms, counts, lag_ms)
            )
            self._counts_file.flush()
            user, system = cpu.self_cpu_us()
            seen_user, seen_system = self._cpu_seen
            self._cpu_seen = (user, system)
            self._cpu_file.write(
                codecs.cpu_line(start_ms, end_ms - start_ms, user - seen_user, system - seen_system)
            )
            self._cpu_file.flush()
            for k, v in counts.items():
                self.totals[k] += v
            self.interval_start_ms = end_ms

    def wait_for_records(self, end_ms: int, bound_s: float) -> None:
        """Wait (at most ``bound_s``) until every sender sending in runs recorded what was
        confirmed before ``end_ms``, and every receiver in lanes what it received before
        it (their watermarks), so that the interval ending there gets it."""
        deadline = time.monotonic() + bound_s
        marks: list[SenderStats | ReceiverStats] = [*self.senders, *self.receivers]
        while any(s.watermark_ms is not None and s.watermark_ms < end_ms for s in marks):
            if time.monotonic() >= deadline:
                return
            time.sleep(0.0005)

    def _tick_senders(self, counts: dict[str, int], end_ms: int) -> tuple[int, int]:
        calls, sizes, failed, unsent = [], [], [], []
        last_ms = lag_ns = 0
        now_ns = time.monotonic_ns()
        for stats in self.senders:
            call_us, batch_sizes, failed_us, unsent_us, c, last = stats.swap(end_ms)
            calls.append(call_us)
            sizes.append(batch_sizes)
            failed.append(failed_us)
            unsent.append(unsent_us)
            for k, v in c.items():
                counts[k] += v
            if c["confirmed"]:
                last_ms = max(last_ms, last or stats.last_confirm_ms)
            if stats.schedule is not None:
                lag_ns = max(lag_ns, stats.schedule.behind_max_ns(now_ns))
        if calls:
            call = np.concatenate(calls)
            self.hists["send_call_us"].record(call)
            self.hists["send_msg_us"].record(call, np.concatenate(sizes))
            self.hists["send_msg_us"].record(np.concatenate(unsent))
            self.hists["send_failed_us"].record(np.concatenate(failed))
        return last_ms, lag_ns // 1_000_000

    def _tick_receivers(self, counts: dict[str, int]) -> int:
        last_ms = 0
        for thread, stats in enumerate(self.receivers):
            headers, flagged, recv_ns, lens, c = stats.swap()
            foreign = c.pop("foreign")  # too short for a header; bad headers are added below
            for k, v in c.items():
                counts[k] += v
            if c["received"]:
                last_ms = max(last_ms, _ms(stats.last_recv_ns))
            if lens.size:
                decoded, ok = envelope.split_foreign(headers)
                recv = np.repeat(recv_ns, lens)
                foreign += int(decoded.size - np.count_nonzero(ok))
                if not ok.all():
                    decoded, recv, flagged = decoded[ok], recv[ok], flagged[ok]
                first = self.delivery.add(thread, decoded, flagged)
                latency = (recv - decoded["sent_ns"]) // 1000
                correction = self._correction_us(decoded["sender"])
                if correction is not None:
                    latency = latency - correction  # below 0: clamped and counted
                # each thread's at once (no joined copies: the arrays stay small)
                self.hists["processing_us"].record(latency)
                self.hists["processing_first_us"].record(latency[first])
                counts["first_received"] += int(np.count_nonzero(first))
            if foreign:
                counts["foreign"] += foreign
                self.delivery.foreign += foreign
                if not self._foreign_logged:
                    self._foreign_logged = True
                    LOG.warning(
                        "%d received message(s) do not carry an mqlab header: counted as "
                        "foreign, left out of latency and delivery figures (logged once)",
                        foreign,
                    )
        return last_ms

    def close(self) -> None:
        for f in self._files:
            f.close()


def now_ms() -> int:
    """Wall clock, ms since the epoch (:func:`mqlab.clock.wall_ms`)."""
    return clock.wall_ms()
