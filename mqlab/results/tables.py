"""Turn the job's finalized figures into the run, windows, latency, delivery and problems
tables (pyarrow), with fixed schemas so every run's Parquet concatenates into the catalog.

Field names follow summary.json: ``throughput.send_msgs_per_s`` becomes
``send_msgs_per_s``, ``latency_us.processing_us.p95`` becomes ``processing_us_p95``.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from mqlab.results.hlog import PERCENTILES
from mqlab.results.partials import WHOLE, Key
from mqlab.results.runmeta import RunMeta

FORMAT_VERSION = 1
METRICS = ("send_call_us", "send_msg_us", "processing_us")
FIGURES = ("count", "mean", *(n for n, _ in PERCENTILES), "max")
THROUGHPUT = ("send_msgs_per_s", "receive_msgs_per_s", "send_mb_per_s", "receive_mb_per_s")
DELIVERY = (
    "sent",
    "confirmed",
    "failed",
    "received",
    "unique_received",
    "lost",
    "duplicated",
    "reordered",
    "redelivered",
)
TABLES = ("runs", "windows", "latency", "delivery", "problems")


def _fig_type(fig: str) -> pa.DataType:
    return pa.float64() if fig == "mean" else pa.int64()


_LAT_FIELDS = [pa.field(f"{m}_{f}", _fig_type(f)) for m in METRICS for f in FIGURES]
_TP_FIELDS = [pa.field(n, pa.float64()) for n in THROUGHPUT]
_META_FIELDS = [
    pa.field("run_id", pa.string()),
    pa.field("run_dir", pa.string()),
    pa.field("scenario", pa.string()),
    pa.field("broker", pa.string()),
    pa.field("profile", pa.string()),
    pa.field("sender_threads", pa.int64()),
    pa.field("receiver_threads", pa.int64()),
    pa.field("sender_nodes", pa.int64()),
    pa.field("receiver_nodes", pa.int64()),
    pa.field("message_bytes", pa.int64()),
    pa.field("batch", pa.int64()),
    pa.field("status", pa.string()),
    pa.field("end_reason", pa.string()),
    pa.field("started_at", pa.string()),
    pa.field("ended_at", pa.string()),
    pa.field("measure_start_ms", pa.int64()),
    pa.field("warmup_end_ms", pa.int64()),
    pa.field("measure_end_ms", pa.int64()),
    pa.field("mqlab_version", pa.string()),
    pa.field("git_commit", pa.string()),
    pa.field("cluster_target", pa.string()),
    pa.field("host_cpu_model", pa.string()),
    pa.field("sweep", pa.string()),
]
_META = {b"format_version": str(FORMAT_VERSION).encode()}
SCHEMAS: dict[str, pa.Schema] = {
    "runs": pa.schema(
        [
            pa.field("format_version", pa.int64()),
            *_META_FIELDS,
            pa.field("window_s", pa.float64()),
            *_TP_FIELDS,
            *_LAT_FIELDS,
            *[pa.field(f"delivery_{d}", pa.int64()) for d in DELIVERY],
            pa.field("bad_lines", pa.int64()),
            pa.field("missing_files", pa.int64()),
            pa.field("summarized_at", pa.string()),
        ],
        metadata=_META,
    ),
    "windows": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("window_index", pa.int64()),
            pa.field("window_start_ms", pa.int64()),
            pa.field("window_end_ms", pa.int64()),
            *_TP_FIELDS,
            *_LAT_FIELDS,
        ],
        metadata=_META,
    ),
    "latency": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("metric", pa.string()),
            pa.field("window_index", pa.int64()),
            pa.field("window_start_ms", pa.int64()),
            *[pa.field(f, _fig_type(f)) for f in FIGURES],
            pa.field("histogram", pa.string()),
        ],
        metadata=_META,
    ),
    "delivery": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("sender_id", pa.int64()),
            *[pa.field(d, pa.int64()) for d in DELIVERY],
        ],
        metadata=_META,
    ),
    "problems": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("file", pa.string()),
            pa.field("line", pa.int64()),
            pa.field("problem", pa.string()),
        ],
        metadata=_META,
    ),
}


def _rate(n: int, start_ms: int, last_end_ms: int) -> float:
    return n / ((last_end_ms - start_ms) / 1000) if last_end_ms > start_ms and n else 0.0


def _throughput(
    results: dict[Key, Any], run_id: str, w: int, start_ms: int, message_bytes: int | None
) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for role, name in (("sender", "send"), ("receiver", "receive")):
        n, last = results.get(("cnt", run_id, role, w), (0, 0))
        rate = _rate(n, start_ms, last)
        # rounded as summary.json rounds them
        out[f"{name}_msgs_per_s"] = round(rate, 3)
        out[f"{name}_mb_per_s"] = round(rate * message_bytes / 1e6, 6) if message_bytes else None
    return out


def _latency_flat(results: dict[Key, Any], run_id: str, w: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in METRICS:
        figs = results.get(("lat", run_id, m, w), {})
        for f in FIGURES:
            out[f"{m}_{f}"] = figs.get(f, 0.0 if f == "mean" else 0)
    return out


def build_tables(meta: RunMeta, results: dict[Key, Any], window_ms: int) -> dict[str, pa.Table]:
    rid = meta.run_id
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    problems = results.get(("prb", rid), [])
    for path, line, text in problems:
        rows["problems"].append({"run_id": rid, "file": path, "line": line, "problem": text})
    senders = sorted(k[2] for k in results if k[0] == "dlv" and k[1] == rid)
    totals = dict.fromkeys(DELIVERY, 0)
    for sid in senders:
        rec = results[("dlv", rid, sid)]
        rows["delivery"].append({"run_id": rid, "sender_id": sid, **rec})
        for d in DELIVERY:
            totals[d] += rec[d]
    if ("rdl", rid) in results:  # run total as summary.json takes it: receivers' worker.json
        totals["redelivered"] = results[("rdl", rid)]
    windows = sorted({k[-1] for k in results if k[0] in ("lat", "cnt") and k[1] == rid} - {WHOLE})
    for w in windows:
        start = meta.warmup_end_ms + w * window_ms
        rows["windows"].append(
            {
                "run_id": rid,
                "window_index": w,
                "window_start_ms": start,
                "window_end_ms": start + window_ms,
                **_throughput(results, rid, w, start, meta.message_bytes),
                **_latency_flat(results, rid, w),
            }
        )
    for key, figs in results.items():
        if key[0] == "lat" and key[1] == rid:
            w = key[3]
            rows["latency"].append(
                {
                    "run_id": rid,
                    "metric": key[2],
                    "window_index": None if w == WHOLE else w,
                    "window_start_ms": meta.warmup_end_ms + (0 if w == WHOLE else w * window_ms),
                    **figs,
                }
            )
    rows["latency"].sort(
        key=lambda r: (r["metric"], -1 if r["window_index"] is None else r["window_index"])
    )
    rows["runs"].append(
        {
            "format_version": FORMAT_VERSION,
            **meta.row(),
            "window_s": window_ms / 1000,
            **_throughput(results, rid, WHOLE, meta.warmup_end_ms, meta.message_bytes),
            **_latency_flat(results, rid, WHOLE),
            **{f"delivery_{d}": totals[d] for d in DELIVERY},
            "bad_lines": sum(1 for p in problems if p[1] is not None),
            "missing_files": sum(1 for p in problems if p[1] is None),
            "summarized_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    return {t: pa.Table.from_pylist(rows[t], schema=SCHEMAS[t]) for t in TABLES}


def as_summary(run_row: dict[str, Any]) -> dict[str, Any]:
    """The figures of one ``runs`` row, nested as in summary.json."""
    return {
        "throughput": {n: run_row[n] for n in THROUGHPUT},
        "latency_us": {m: {f: run_row[f"{m}_{f}"] for f in FIGURES} for m in METRICS},
        "delivery": {d: run_row[f"delivery_{d}"] for d in DELIVERY},
    }
