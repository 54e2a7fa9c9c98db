"""A tiny format-2 run archive for the report tests, written with the archive's own writers.

One sender node (``threads`` sender ids, 50 msgs/s each, fixed rate, one message per
send call) and two receiver nodes that take 80 % of that rate, so a backlog builds up
while the senders run and drains after. What goes in, and so what the summary must
report, is in :class:`TinyRun`:

- sender id 1 fails 4 sends (seqs 100-103, 1 s until the failure);
- sender id 0's seqs 7 and 8 are confirmed and never received (lost), seq 9 is still in
  the broker at the end (undrained, identified);
- sender id 1's seq 5 is delivered twice to its receiver node (duplicated, redelivered);
- receiver-00 recorded 3 processing latencies below zero (clamped);
- the senders fall behind their schedule in seconds 5-7 (lag 30, 120, 60 ms).
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroaring import BitMap64

from mqlab.archive import codecs, layout, records
from mqlab.archive.formats import write_json
from mqlab.archive.hlog import IntervalLogWriter

START_MS = 1_763_806_925_250  # the senders' go; not on a whole second
WARMUP_MS = 2_000
SEND_S = 8
RATE_PER_ID = 50
LOST = {0: (7, 8)}
UNDRAINED = {0: (9,)}
FAILED = {1: (100, 101, 102, 103)}
DUPLICATED = {1: (5,)}
BELOW_ZERO = 3
LAG_MS = {5: 30, 6: 120, 7: 60}  # second since go -> sender lag at that second's end


@dataclass
class TinyRun:
    run_dir: Path
    run_id: str
    start_ms: int
    confirmed: int
    failed: int
    received: int
    lost: int
    undrained: int
    duplicated: int
    processing_us: list[int] = field(default_factory=list)


def _boundaries(start_ms: int, end_ms: int) -> list[int]:
    """Interval edges: the start, every whole second in between, the end."""
    first = start_ms - start_ms % 1000 + 1000
    return [start_ms, *range(first, end_ms, 1000), end_ms]


def _write_worker(
    wdir: Path,
    role: str,
    edges: list[int],
    events: dict[str, list[tuple[int, int]]],  # metric -> (event ms, value us)
    counts: list[tuple[int, str]],  # (event ms, counter)
    lag: dict[int, int],  # interval start ms -> lag ms at its end
) -> None:
    wdir.mkdir(parents=True)
    writers = {}
    files = []
    for metric in layout.LOGS[role]:
        f = layout.log_file(wdir, metric).open("w")
        files.append(f)
        writers[metric] = IntervalLogWriter(f, edges[0], f"mqlab metric={metric} unit=us")
    with (wdir / layout.COUNTS).open("w") as cf:
        cf.write(codecs.counts_header())
        for a, b in zip(edges, edges[1:], strict=False):
            for metric, w in writers.items():
                h = codecs.new_histogram()
                for t, v in events.get(metric, []):
                    if a <= t < b:
                        h.record_value(v)
                w.write(h, a, b)
            c = dict.fromkeys(codecs.COUNT_FIELDS, 0)
            last = 0
            for t, name in counts:
                if a <= t < b:
                    c[name] += 1
                    if name == codecs.COUNTED[role]:
                        last = max(last, t)
            cf.write(codecs.counts_line(a, b - a, last, c, lag.get(a, 0)))
    for f in files:
        f.close()


def write_tiny_run(
    results_dir: Path,
    start_ms: int = START_MS,
    threads: int = 2,
    omit: tuple[str, ...] = (),
    undrained: records.UndrainedRecord | None = None,
) -> TinyRun:
    """Write the run under ``results_dir``; ``omit``: files to leave out (paths in the run
    directory); ``undrained``: another undrained.json record than the default."""
    rng = random.Random(start_ms)
    stamp = dt.datetime.fromtimestamp(start_ms // 1000, dt.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    run_id = f"{stamp}_tiny_nats-r3_{threads}t-1s-2r"
    run_dir = results_dir / run_id
    run_dir.mkdir(parents=True)
    per_id = RATE_PER_ID * SEND_S
    interval_ms = 1000 // RATE_PER_ID

    # senders: (intended ms, sid, seq), in send order
    sends = sorted(
        (start_ms + k * interval_ms + sid * interval_ms // threads, sid, k)
        for sid in range(threads)
        for k in range(per_id)
    )
    sent = {sid: records.SentSender() for sid in range(threads)}
    s_events: dict[str, list[tuple[int, int]]] = {m: [] for m in layout.LOGS["sender"]}
    s_counts: list[tuple[int, str]] = []
    confirmed_order = []
    for t, sid, k in sends:
        rec = sent[sid]
        rec.sent += 1
        s_counts.append((t, "sent"))
        if k in FAILED.get(sid, ()):
            rec.failed += 1
            s_counts.append((t + 1000, "failed"))
            s_events["send_failed_us"].append((t + 1000, 1_000_000))
            continue
        call_us = rng.randint(2_000, 5_000)
        done = t + call_us // 1000
        rec.confirmed += 1
        rec.confirmed_seqs.add(k)
        s_counts.append((done, "confirmed"))
        s_events["send_call_us"].append((done, call_us))
        s_events["send_msg_us"].append((done, call_us))
        confirmed_order.append((done, sid, k))
    sender_end = max(t for t, _ in s_counts) + 1
    sedges = _boundaries(start_ms, sender_end)
    lag = {}
    for sec, ms in LAG_MS.items():
        t = start_ms + sec * 1000
        lag[max(a for a in sedges if a <= t)] = ms
    _write_worker(run_dir / "workers" / "sender-00", "sender", sedges, s_events, s_counts, lag)
    records.write_sent(run_dir / "workers" / "sender-00" / layout.SENT, sent)

    # receivers: 80 % of the send rate from the go on, so a backlog builds up
    recv_gap_ms = 1000 / (RATE_PER_ID * threads * 0.8)
    delivered = [
        (done, sid, k)
        for done, sid, k in confirmed_order
        if k not in LOST.get(sid, ()) and k not in UNDRAINED.get(sid, ())
    ]
    deliveries = []
    for g, (done, sid, k) in enumerate(delivered):
        at = max(done + 1, start_ms + round((g + 1) * recv_gap_ms))
        deliveries.append((at, sid, k, False))
        if k in DUPLICATED.get(sid, ()):
            deliveries.append((at + 5, sid, k, True))
    receiver_end = max(d[0] for d in deliveries) + 500
    redges = _boundaries(start_ms - 800, receiver_end)  # receivers start before the go
    send_ms = {(sid, k): t for t, sid, k in sends}
    processing_us = []
    for node in range(2):
        got: dict[int, records.ReceivedSender] = {}
        r_events: dict[str, list[tuple[int, int]]] = {m: [] for m in layout.LOGS["receiver"]}
        r_counts: list[tuple[int, str]] = []
        for at, sid, k, again in deliveries:
            if k % 2 != node:
                continue
            got_rec = got.setdefault(sid, records.ReceivedSender())
            us = (at - send_ms[(sid, k)]) * 1000
            processing_us.append(us)
            got_rec.received += 1
            r_counts += [(at, "received"), (at, "acked")]
            r_events["processing_us"].append((at, us))
            if again:
                got_rec.redelivered += 1
                r_counts.append((at, "redelivered"))
            else:
                got_rec.first_received += 1
                got_rec.seqs.add(k)
                r_counts.append((at, "first_received"))
                r_events["processing_first_us"].append((at, us))
        wid = f"receiver-{node:02d}"
        _write_worker(run_dir / "workers" / wid, "receiver", redges, r_events, r_counts, {})
        records.write_delivery(
            run_dir / "workers" / wid / layout.DELIVERY, records.DeliveryRecord(got)
        )

    workers: list[dict[str, Any]] = []
    for wid, role, node, edges, ids in (
        ("sender-00", "sender", 0, sedges, list(range(threads))),
        ("receiver-00", "receiver", 0, redges, []),
        ("receiver-01", "receiver", 1, redges, []),
    ):
        oor = {m: {"below_zero": 0, "above_max": 0} for m in layout.LOGS[role]}
        if wid == "receiver-00":
            oor["processing_us"]["below_zero"] = BELOW_ZERO
        records.write_worker(
            run_dir / "workers" / wid / layout.WORKER,
            records.WorkerRecord(
                worker_id=wid,
                role=role,
                node=node,
                threads=threads,
                sender_ids=ids,
                started_ms=edges[0],
                go_ms=start_ms if role == "sender" else None,
                ended_ms=edges[-1],
                status="ok",
                error=None,
                messages={},
                out_of_range=oor,
            ),
        )
        workers.append({"id": wid, "role": role, "node": node, "status": "ok"})
    if undrained is None:
        undrained = records.UndrainedRecord(
            checked_ms=receiver_end + 100,
            count=sum(len(v) for v in UNDRAINED.values()),
            in_flight=0,
            identified=True,
            senders={sid: BitMap64(seqs) for sid, seqs in UNDRAINED.items()},
        )
    records.write_undrained(run_dir / layout.UNDRAINED, undrained)

    def iso(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")

    write_json(
        run_dir / layout.MANIFEST,
        {
            "run_id": run_id,
            "status": "complete",
            "end_reason": "completed",
            "started_at": iso(start_ms - 1000),
            "ended_at": iso(receiver_end + 200),
            "measure": {
                "start_ms": start_ms,
                "warmup_end_ms": start_ms + WARMUP_MS,
                "end_ms": receiver_end,
            },
            "mqlab": {"version": "0.2.0", "git_commit": "0" * 40},
            "broker": {"name": "nats", "profile": "nats-r3"},
            "cluster": {"target": "local"},
            "host": {"cpu_model": "test"},
            "workers": workers,
        },
    )
    (run_dir / layout.SCENARIO).write_text(
        'format_version = 1\nname = "tiny"\nbroker = "nats"\nprofile = "nats-r3"\n\n'
        "[workload]\nmessage_bytes = 100\nsend_batch_max = 1\n"
        f'mode = "fixed_rate"\nrate_per_s = {float(RATE_PER_ID)}\n'
        f"warmup_s = {WARMUP_MS / 1000}\nduration_s = {float(SEND_S)}\n\n"
        "[clients]\nsender_nodes = 1\nreceiver_nodes = 2\n"
        f"sender_threads = {threads}\nreceiver_threads = {threads}\n"
    )
    for rel in omit:
        (run_dir / rel).unlink()
    return TinyRun(
        run_dir=run_dir,
        run_id=run_id,
        start_ms=start_ms,
        confirmed=sum(r.confirmed for r in sent.values()),
        failed=sum(r.failed for r in sent.values()),
        received=len(deliveries),
        lost=sum(len(v) for v in LOST.values()),
        undrained=undrained.count or 0,
        duplicated=sum(len(v) for v in DUPLICATED.values()),
        processing_us=processing_us,
    )
