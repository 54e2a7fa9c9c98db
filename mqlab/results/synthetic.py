"""Synthetic run archives that follow docs/archive-format.md exactly.

Used by the tests and by ``bench/summarize.py`` until (and besides) real runs.
Every latency value recorded is kept (when ``keep_samples``) so tests can check
the summary against the raw samples.
"""

from __future__ import annotations

import base64
import csv
import json
import logging
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram
from pyroaring import BitMap

from mqlab.workload.histograms import new_histogram
from mqlab.workload.recorder import COUNT_COLUMNS, encode_bitmap

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 1
SENDER_METRICS = ("send_call_us", "send_msg_us")
RECEIVER_METRICS = ("processing_us",)


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate. Times are wall-clock epoch seconds; rates are per sender thread."""

    scenario: str = "quickstart"
    broker: str = "nats"
    profile: str = "nats-r3"
    sender_nodes: int = 1
    receiver_nodes: int = 2
    sender_threads: int = 5
    receiver_threads: int = 5
    message_bytes: int = 1024
    batch: int = 10
    start_s: float = 1763806925.25  # first interval starts here (not on a whole second)
    warmup_s: int = 5
    duration_s: int = 30  # measured period after warm-up
    tail_s: float = 0.6  # the last interval ends this long after a whole second
    rate_per_thread: int = 20  # messages per second per sender thread
    samples_per_interval: int = 50  # latency values per interval per log
    distinct_histograms: int = 0  # >0: reuse a pool of encoded histograms (fast, for bench)
    lost_per_sender: int = 0
    duplicated_per_sender: int = 0
    reordered_per_receiver: int = 0
    seed: int = 0
    keep_samples: bool = True
    extra: dict[str, object] = field(default_factory=dict)  # extra [workload] keys


@dataclass
class SyntheticRun:
    run_dir: Path
    run_id: str
    warmup_end_ms: int
    # metric -> list of (interval start ms, value us) for every recorded value
    samples: dict[str, list[tuple[int, int]]]
    delivery: dict[str, int]


def run_dir_name(spec: SyntheticSpec) -> str:
    stamp = datetime.fromtimestamp(int(spec.start_s), tz=UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    if spec.sender_threads == spec.receiver_threads:
        threads = f"{spec.sender_threads}t"
    else:
        threads = f"{spec.sender_threads}x{spec.receiver_threads}t"
    return (
        f"{stamp}_{spec.scenario}_{spec.profile}_{threads}-"
        f"{spec.sender_nodes}s-{spec.receiver_nodes}r"
    )


def intervals(start_s: float, end_s: float) -> Iterator[tuple[float, float]]:
    """Intervals aligned to whole epoch seconds: (start, end) in epoch seconds."""
    t = start_s
    while t < end_s:
        nxt = min(math.floor(t) + 1.0, end_s)
        yield t, nxt
        t = nxt


def hlog_header(metric: str, worker: str, run_id: str, start_s: float) -> str:
    iso = datetime.fromtimestamp(start_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return (
        f"#[mqlab metric={metric} unit=us worker={worker} run={run_id}]\n"
        "#[Histogram log format version 1.3]\n"
        f"#[StartTime: {start_s:.3f} (seconds since epoch), {iso}]\n"
        f"#[BaseTime: {start_s:.3f} (seconds since epoch)]\n"
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
    )




class _Writer:
    def __init__(self, spec: SyntheticSpec, run_dir: Path, run_id: str):
        self.spec = spec
        self.run_dir = run_dir
        self.run_id = run_id
        self.rng = random.Random(spec.seed)
        self.samples: dict[str, list[tuple[int, int]]] = {
            m: [] for m in SENDER_METRICS + RECEIVER_METRICS
        }
        self.pool: list[tuple[bytes, int]] = []
        self.end_s = math.floor(spec.start_s) + 1 + spec.warmup_s + spec.duration_s + spec.tail_s
        self.spans = list(intervals(spec.start_s, self.end_s))

    def _values(self, metric: str, n: int) -> list[int]:
        mu = {"send_call_us": 7.5, "send_msg_us": 7.5, "processing_us": 8.5}[metric]
        return [max(1, int(self.rng.lognormvariate(mu, 0.8))) for _ in range(n)]

    def _interval_payload(self, metric: str, start_ms: int) -> tuple[bytes, int]:
        if self.spec.distinct_histograms > 0:
            if len(self.pool) < self.spec.distinct_histograms:
                h = new_histogram()
                for v in self._values(metric, self.spec.samples_per_interval):
                    h.record_value(v)
                self.pool.append((h.encode(), h.get_max_value()))
            return self.pool[self.rng.randrange(len(self.pool))]
        h = new_histogram()
        for v in self._values(metric, self.spec.samples_per_interval):
            h.record_value(v)
            if self.spec.keep_samples:
                self.samples[metric].append((start_ms, v))
        return h.encode(), h.get_max_value()

    def write_hlog(self, path: Path, metric: str, worker: str) -> None:
        with path.open("w") as f:
            f.write(hlog_header(metric, worker, self.run_id, self.spec.start_s))
            for s, e in self.spans:
                start_ms = round(s * 1000)
                payload, max_us = self._interval_payload(metric, start_ms)
                rel = s - self.spec.start_s
                f.write(f"{rel:.3f},{e - s:.3f},{max_us / 1000:.3f},{payload.decode('ascii')}\n")

    def per_interval(self, total_rate: int) -> list[int]:
        return [round(total_rate * (e - s)) for s, e in self.spans]

    def write_counts(self, path: Path, role: str, per_interval: list[int]) -> None:
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COUNT_COLUMNS)
            for (s, e), n in zip(self.spans, per_interval, strict=True):
                start_ms, end_ms = round(s * 1000), round(e * 1000)
                row = [n, n, 0, 0, 0, 0] if role == "sender" else [0, 0, 0, n, n, 0]
                w.writerow([start_ms, end_ms - start_ms, *row])

    def write_worker_json(
        self, wdir: Path, role: str, node: int, sender_ids: list[int], messages: dict[str, int]
    ) -> None:
        threads = self.spec.sender_threads if role == "sender" else self.spec.receiver_threads
        doc = {
            "format_version": FORMAT_VERSION,
            "role": role,
            "node": node,
            "threads": threads,
            "sender_ids": sender_ids,
            "started_ms": round(self.spec.start_s * 1000),
            "ended_ms": round(self.end_s * 1000),
            "status": "ok",
            "error": None,
            "messages": messages,
        }
        (wdir / "worker.json").write_text(json.dumps(doc, indent=1))


def write_synthetic_run(results_dir: Path, spec: SyntheticSpec | None = None) -> SyntheticRun:
    """Write one run archive under ``results_dir`` and return what went into it."""
    spec = spec or SyntheticSpec()
    name = run_dir_name(spec)
    run_dir = Path(results_dir) / name
    (run_dir / "workers").mkdir(parents=True, exist_ok=False)
    w = _Writer(spec, run_dir, name)
    warmup_end_ms = (math.floor(spec.start_s) + 1 + spec.warmup_s) * 1000
    sender_ids_all: list[int] = []
    confirmed_total: dict[int, int] = {}
    workers_meta: list[dict[str, object]] = []

    for node in range(spec.sender_nodes):
        wid = f"sender-{node:02d}"
        wdir = run_dir / "workers" / wid
        wdir.mkdir()
        ids = [node * spec.sender_threads + t for t in range(spec.sender_threads)]
        sender_ids_all += ids
        per_thread = w.per_interval(spec.rate_per_thread)
        node_counts = [n * spec.sender_threads for n in per_thread]
        w.write_counts(wdir / "counts.csv", "sender", node_counts)
        for metric in SENDER_METRICS:
            w.write_hlog(wdir / f"{metric}.hlog", metric, wid)
        senders = {}
        for sid in ids:
            n = sum(per_thread)
            confirmed_total[sid] = n
            senders[str(sid)] = {
                "sent": n,
                "confirmed": n,
                "failed": 0,
                "confirmed_bitmap": encode_bitmap(BitMap(range(n))),
            }
        (wdir / "sent.json").write_text(
            json.dumps({"format_version": FORMAT_VERSION, "senders": senders})
        )
        total = sum(node_counts)
        w.write_worker_json(wdir, "sender", node, ids, {"sent": total, "confirmed": total})
        workers_meta.append({"id": wid, "role": "sender", "node": node, "status": "ok"})

    r_nodes = spec.receiver_nodes
    lost = duplicated = reordered = received_all = unique_all = 0
    for node in range(r_nodes):
        wid = f"receiver-{node:02d}"
        wdir = run_dir / "workers" / wid
        wdir.mkdir()
        recs: dict[str, dict[str, Any]] = {}
        for sid in sender_ids_all:
            n = confirmed_total[sid]
            bm = BitMap(range(node, n, r_nodes))
            if node == 0:  # the lost seqs are the first ones of receiver 0's share
                for seq in list(bm)[: spec.lost_per_sender]:
                    bm.discard(seq)
                lost += min(spec.lost_per_sender, len(range(node, n, r_nodes)))
            dup = spec.duplicated_per_sender if node == 0 else 0
            recs[str(sid)] = {
                "received": len(bm) + dup,
                "redelivered": dup,
                "reordered": 0,
                "bitmap": encode_bitmap(bm),
            }
            duplicated += dup
            received_all += len(bm) + dup
            unique_all += len(bm)
        if recs and spec.reordered_per_receiver:
            first = next(iter(recs))
            recs[first]["reordered"] = spec.reordered_per_receiver
            reordered += spec.reordered_per_receiver
        (wdir / "delivery.json").write_text(
            json.dumps({"format_version": FORMAT_VERSION, "senders": recs})
        )
        share = spec.sender_nodes * spec.sender_threads * spec.rate_per_thread / r_nodes
        w.write_counts(wdir / "counts.csv", "receiver", w.per_interval(round(share)))
        for metric in RECEIVER_METRICS:
            w.write_hlog(wdir / f"{metric}.hlog", metric, wid)
        w.write_worker_json(
            wdir,
            "receiver",
            node,
            [],
            {
                "received": sum(int(r["received"]) for r in recs.values()),
                "redelivered": sum(int(r["redelivered"]) for r in recs.values()),
            },
        )
        workers_meta.append({"id": wid, "role": "receiver", "node": node, "status": "ok"})

    _write_scenario_and_manifest(spec, run_dir, name, w.end_s, warmup_end_ms, workers_meta)
    confirmed = sum(confirmed_total.values())
    delivery = {
        "sent": confirmed,
        "confirmed": confirmed,
        "failed": 0,
        "received": received_all,
        "unique_received": unique_all,
        "lost": lost,
        "duplicated": duplicated,
        "reordered": reordered,
        "redelivered": duplicated,
    }
    return SyntheticRun(run_dir, name, warmup_end_ms, w.samples, delivery)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _write_scenario_and_manifest(
    spec: SyntheticSpec,
    run_dir: Path,
    run_id: str,
    end_s: float,
    warmup_end_ms: int,
    workers: list[dict[str, object]],
) -> None:
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in spec.extra.items())
    (run_dir / "scenario.toml").write_text(
        f'format_version = 1\nname = "{spec.scenario}"\n\n'
        f'broker = "{spec.broker}"\nprofile = "{spec.profile}"\n\n'
        f"[workload]\nmessage_bytes = {spec.message_bytes}\nsend_batch_min = 1\n"
        f"send_batch_max = {spec.batch}\nreceive_batch_max = {spec.batch}\n"
        f"warmup_s = {spec.warmup_s}\nduration_s = {spec.duration_s}\n{extra}\n"
        f"[clients]\nsender_nodes = {spec.sender_nodes}\nreceiver_nodes = {spec.receiver_nodes}\n"
        f"sender_threads = {spec.sender_threads}\nreceiver_threads = {spec.receiver_threads}\n"
    )
    manifest = {
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "status": "complete",
        "end_reason": "completed",
        "started_at": _iso(spec.start_s),
        "ended_at": _iso(end_s),
        "measure": {
            "start_ms": round(spec.start_s * 1000),
            "warmup_end_ms": warmup_end_ms,
            "end_ms": warmup_end_ms + spec.duration_s * 1000,
        },
        "mqlab": {
            "version": "0.1.0",
            "git_commit": "synthetic",
            "git_dirty": False,
            "flake_rev": None,
            "nixpkgs_rev": None,
        },
        "python": "3.11",
        "libraries": {},
        "broker": {"name": spec.broker, "profile": spec.profile, "server_versions": []},
        "cluster": {"target": "synthetic", "nodes": 3},
        "host": {"cpu_model": "synthetic", "cpus": 2, "memory_bytes": 0, "kernel": "", "os": ""},
        "clock": {"source": "synthetic", "offset_ms": 0, "sync": None},
        "workers": workers,
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
