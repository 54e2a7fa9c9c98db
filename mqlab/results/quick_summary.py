"""The quick summary of one run (``summary.json``), straight from the archived raw logs.

Definitions are in docs/archive-format.md; the Spark job reproduces them exactly.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram
from pyroaring import BitMap

from mqlab.errors import ArchiveError
from mqlab.results.archive import read_json, worker_dirs
from mqlab.results import hlog
from mqlab.results.tables import DELIVERY
from mqlab.workload.histograms import new_histogram, percentiles
from mqlab.workload.recorder import decode_bitmap

FORMAT_VERSION = 1
METRICS = {"sender": ("send_call_us", "send_msg_us"), "receiver": ("processing_us",)}


def merged_histogram(files: list[Path], from_ms: int) -> HdrHistogram:
    """All intervals starting at or after ``from_ms``, merged. mqlab's own logs must be
    intact: any problem is an error here (the Spark job skips and counts problems)."""
    h = new_histogram()
    for f in files:
        lines, problem = hlog.read_lines(str(f))
        if problem is not None or lines is None:
            raise ArchiveError(str(problem))
        for item in hlog.parse_log(str(f), lines):
            if isinstance(item, hlog.Problem):
                raise ArchiveError(str(item))
            if isinstance(item, hlog.Interval) and item.start_ms >= from_ms:
                h.decode_and_add(item.payload)
    return h


def _throughput(dirs: list[Path], column: str, from_ms: int) -> tuple[int, float]:
    """(messages, rate per s) over measured intervals: rate = n / (last active end - from)."""
    total = 0
    last_end = None
    for d in dirs:
        with (d / "counts.csv").open(newline="") as f:
            for row in csv.DictReader(f):
                start = int(row["start_ms"])
                n = int(row[column])
                if start >= from_ms and n > 0:
                    total += n
                    end = start + int(row["length_ms"])
                    last_end = end if last_end is None else max(last_end, end)
    if not total or last_end is None or last_end <= from_ms:
        return total, 0.0
    return total, total / ((last_end - from_ms) / 1000)


def delivery(run_dir: Path) -> dict[str, int]:
    confirmed: dict[str, BitMap] = {}
    out = dict.fromkeys(DELIVERY, 0)
    for d in worker_dirs(run_dir, "sender"):
        if not (d / "sent.json").is_file():
            continue
        for sid, rec in read_json(d / "sent.json")["senders"].items():
            out["sent"] += rec["sent"]
            out["confirmed"] += rec["confirmed"]
            out["failed"] += rec["failed"]
            confirmed[sid] = decode_bitmap(rec["confirmed_bitmap"])
    seen: dict[str, BitMap] = {}
    for d in worker_dirs(run_dir, "receiver"):
        if (d / "worker.json").is_file():
            out["redelivered"] += int(
                read_json(d / "worker.json")["messages"].get("redelivered", 0)
            )
        if not (d / "delivery.json").is_file():
            continue
        for sid, rec in read_json(d / "delivery.json")["senders"].items():
            out["received"] += rec["received"]
            out["reordered"] += rec["reordered"]
            bm = decode_bitmap(rec["bitmap"])
            seen[sid] = seen[sid] | bm if sid in seen else bm
    for sid, c in confirmed.items():
        out["lost"] += len(c - seen.get(sid, BitMap()))
    out["unique_received"] = sum(len(b) for b in seen.values())
    out["duplicated"] = out["received"] - out["unique_received"]
    return out


def summarize_run(run_dir: Path) -> dict[str, Any]:
    run_dir = Path(run_dir)
    manifest = read_json(run_dir / "manifest.json")
    measure = manifest["measure"]
    from_ms = int(measure["warmup_end_ms"])
    import tomllib

    scenario = tomllib.loads((run_dir / "scenario.toml").read_text())
    size = int(scenario["workload"]["message_bytes"])
    senders, receivers = worker_dirs(run_dir, "sender"), worker_dirs(run_dir, "receiver")
    sent_n, send_rate = _throughput(senders, "confirmed", from_ms)
    recv_n, recv_rate = _throughput(receivers, "received", from_ms)
    latency = {}
    for role, dirs in (("sender", senders), ("receiver", receivers)):
        for metric in METRICS[role]:
            files = [d / f"{metric}.hlog" for d in dirs if (d / f"{metric}.hlog").is_file()]
            latency[metric] = percentiles(merged_histogram(files, from_ms))
    return {
        "format_version": FORMAT_VERSION,
        "run_id": run_dir.name,
        "status": manifest.get("status"),
        "measured": {"from_ms": from_ms, "confirmed": sent_n, "received": recv_n},
        "throughput": {
            "send_msgs_per_s": round(send_rate, 3),
            "receive_msgs_per_s": round(recv_rate, 3),
            "send_mb_per_s": round(send_rate * size / 1e6, 6),
            "receive_mb_per_s": round(recv_rate * size / 1e6, 6),
        },
        "latency_us": latency,
        "delivery": delivery(run_dir),
    }


def write_summary(run_dir: Path) -> dict[str, Any]:
    summary = summarize_run(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary
