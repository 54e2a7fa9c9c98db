"""Turn the job's finalized partials into the runs, windows, timeline, latency, delivery
and problems tables (pyarrow), with fixed schemas so every run's Parquet concatenates
into the catalog; and ``summary.json`` from a runs row.

Definitions (docs/archive-format.md has them with examples):
- A role's *measured period* starts at its first counted interval (the first that starts
  at or after the warm-up end) and ends at its last counted event (confirmed send,
  receive) in those intervals: throughput = counted messages / that period.
- ``lost`` = confirmed seqs neither received nor still in the broker; ``undrained`` =
  what the broker still held after the receivers stopped. A figure that depends on a
  missing or unreadable file is null, and ``unknown`` says why.
- The run's context (from the manifest): ``clock_bound_ms``, the worst error bound of a
  corrected end-to-end latency between hosts, against ``clock_budget_ms`` (a run over
  budget gets a line in ``problems``); ``cost_usd`` = the lab's price per hour x the
  run's wall time (manifest ``ended_at - started_at``), and
  ``cost_per_million_delivered_usd`` = cost_usd / (unique messages delivered / 1e6).
  A null context figure says why in ``context_unknown``; unlike ``unknown`` it does not
  make the run partial (a local run has no price: nothing is missing).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from mqlab.analysis import faults as fault_figures
from mqlab.analysis import saturation
from mqlab.analysis.context import FAILED, clock_problem, context_figures, order_figures
from mqlab.analysis.delivery import delivery_figures, fault_messages, out_of_range
from mqlab.analysis.figures import FIGURES
from mqlab.analysis.partials import (
    BUSY_METRIC,
    TIMELINE_FIGURES,
    TIMELINE_METRICS,
    WHOLE,
    Key,
    Span,
)
from mqlab.analysis.plan import RunMeta
from mqlab.analysis.schema import (
    CHECKER,
    DELIVERY,
    OUT_OF_RANGE,
    ROLES,
    SCHEMAS,
    TABLES,
    THROUGHPUT,
)
from mqlab.archive import layout
from mqlab.archive.formats import FORMAT_VERSION
from mqlab.archive.layout import METRICS


# -- throughput ---------------------------------------------------------------------
def period(span: Span | None) -> tuple[int | None, int | None, float | None]:
    """(start, end, seconds) of a role's measured period; ``None``s when nothing counted."""
    if span is None or not span.n or span.first_start_ms is None:
        return None, None, None
    end = max(span.last_event_ms, span.first_start_ms + 1)  # at least 1 ms
    return span.first_start_ms, end, (end - span.first_start_ms) / 1000


def _rate(n: int, seconds: float | None) -> float:
    return n / seconds if n and seconds else 0.0


def _throughput(
    results: dict[Key, Any], rid: str, w: int, message_bytes: int | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for role, name in ROLES:
        span = results.get(("cnt", rid, role, w))
        if w == WHOLE:
            _s, _e, seconds = period(span)
        else:
            whole = results.get(("cnt", rid, role, WHOLE))
            _s, run_end, _x = period(whole)
            seconds = None
            if span is not None and span.first_start_ms is not None and run_end is not None:
                end = min(span.last_end_ms, run_end)
                seconds = (end - span.first_start_ms) / 1000 if end > span.first_start_ms else None
        rate = _rate(span.n if span else 0, seconds)
        out[f"{name}_msgs_per_s"] = round(rate, 3)
        out[f"{name}_mb_per_s"] = round(rate * message_bytes / 1e6, 6) if message_bytes else None
    sender = results.get(("cnt", rid, "sender", w))
    out["sender_lag_ms_max"] = sender.lag_ms if sender else 0
    return out


def _periods(results: dict[Key, Any], rid: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for role, name in ROLES:
        start, end, seconds = period(results.get(("cnt", rid, role, WHOLE)))
        out[f"{name}_start_ms"], out[f"{name}_end_ms"] = start, end
        out[f"{name}_period_s"] = None if seconds is None else round(seconds, 3)
    return out


def _latency_flat(results: dict[Key, Any], rid: str, w: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in METRICS:
        figs = results.get(("lat", rid, m, w), {})
        for f in FIGURES:
            out[f"{m}_{f}"] = figs.get(f, 0.0 if f == "mean" else 0)
    return out


# -- saturation -----------------------------------------------------------------------
def saturation_figures(
    meta: RunMeta,
    results: dict[Key, Any],
    timeline: Sequence[dict[str, Any]],
    fault_rows: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """The ``saturation`` section of the run (CPU per node, client_bound,
    receivers_behind) and its ``runs`` columns."""
    rid = meta.run_id
    periods = {
        role: period(results.get(("cnt", rid, role, WHOLE)))[:2] for role in ("sender", "receiver")
    }
    info = results.get(("wrk", rid), {})
    rows = {k[2]: v for k, v in results.items() if k[0] == "cpu" and k[1] == rid}
    nodes, unknown = saturation.cpu_figures(
        meta.workers,
        info,
        rows,
        json.loads(meta.worker_hosts or "{}"),
        periods,
        json.loads(meta.cpu or "{}"),
    )
    section = saturation.figures(
        nodes,
        unknown,
        timeline,
        periods,
        fault_rows,
        shared_cores=meta.cluster_target == "local" or meta.lab_kind in ("local", "netns"),
        has_receivers=any(r == "receiver" for _w, r in meta.workers),
        busy=_busy(meta, results),
        senders=meta.senders,
    )
    return {
        "client_bound": section["client_bound"],
        "effective_concurrency": section["effective_concurrency"],
        "receivers_behind": section["receivers_behind"],
        "client_cpu_max": section["client_cpu_max"],
        "broker_cpu_max": section["broker_cpu_max"],
        "shared_cores": section["shared_cores"],
        "saturation": saturation.as_json(section),
    }


def _busy(meta: RunMeta, results: dict[Key, Any]) -> list[Any] | None:
    """The senders' confirmed batches per second (partials' ``bsy``) in a closed-loop run
    whose every sender's send latency log was read; else None (no concurrency figure)."""
    rid = meta.run_id
    read = results.get(("ok", rid, BUSY_METRIC), set())
    if meta.mode != "closed_loop" or any(r == "sender" and w not in read for w, r in meta.workers):
        return None
    return [v for k, v in sorted((k, v) for k, v in results.items() if k[:2] == ("bsy", rid))]


# -- the tables -----------------------------------------------------------------------
def _timeline(results: dict[Key, Any], rid: str) -> list[dict[str, Any]]:
    seconds = sorted({k[3] for k in results if k[0] in ("tlc", "tlh") and k[1] == rid})
    rows = []
    backlog = 0
    for sec in seconds:
        snd = results.get(("tlc", rid, "sender", sec), {})
        rcv = results.get(("tlc", rid, "receiver", sec), {})
        backlog += snd.get("confirmed", 0) - rcv.get("received", 0)
        row = {
            "run_id": rid,
            "second_ms": sec,
            "confirmed": snd.get("confirmed", 0),
            "received": rcv.get("received", 0),
            "failed": snd.get("failed", 0),
            "unsent": snd.get("unsent", 0),
            "backlog": backlog,
            "sender_lag_ms": snd.get("lag_ms", 0),
            "repeats": rcv.get("received", 0)
            - rcv.get("first_received", 0)
            - rcv.get("foreign", 0),
        }
        for m in TIMELINE_METRICS:
            figs = results.get(("tlh", rid, m, sec), {})
            for f in TIMELINE_FIGURES:
                row[f"{m}_{f}"] = figs.get(f, 0)
        rows.append(row)
    return rows


def build_tables(meta: RunMeta, results: dict[Key, Any], window_ms: int) -> dict[str, pa.Table]:
    rid = meta.run_id
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    problems = results.get(("prb", rid), [])
    for path, line, text in problems:
        rows["problems"].append({"run_id": rid, "file": path, "line": line, "problem": text})
    totals, per_sender, unknown = delivery_figures(results, meta)
    rows["delivery"] = per_sender
    context, _why = context_figures(meta, totals, unknown)
    if meta.clock_within_budget is False and meta.clock_bound_ms is not None:
        rows["problems"].append(
            {
                "run_id": rid,
                "file": str(Path(meta.run_dir) / layout.MANIFEST),
                "line": None,
                "problem": clock_problem(meta.clock_bound_ms, meta.clock_budget_ms or 0.0),
            }
        )
    windows = sorted({k[-1] for k in results if k[0] in ("lat", "cnt") and k[1] == rid} - {WHOLE})
    for w in windows:
        start = meta.warmup_end_ms + w * window_ms
        rows["windows"].append(
            {
                "run_id": rid,
                "window_index": w,
                "window_start_ms": start,
                "window_end_ms": start + window_ms,
                **_throughput(results, rid, w, meta.message_bytes),
                **_latency_flat(results, rid, w),
            }
        )
    rows["timeline"] = _timeline(results, rid)
    fault_rows = fault_figures.figures(meta.fault_log(), rows["timeline"])
    messages = fault_messages(results, meta, fault_rows, unknown)
    rows["faults"] = [{"run_id": rid, **f, **m} for f, m in zip(fault_rows, messages, strict=True)]
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
    oor = out_of_range(results, meta)
    for k, v in oor.items():
        if v is None:
            unknown[k] = "worker.json missing or unreadable"
    run = {
        "format_version": FORMAT_VERSION,
        **meta.row(),
        "window_s": window_ms / 1000,
        **_throughput(results, rid, WHOLE, meta.message_bytes),
        **_periods(results, rid),
        **saturation_figures(meta, results, rows["timeline"], fault_rows),
        "longest_gap_send_s": fault_figures.longest_gap_s(rows["timeline"], "confirmed"),
        "longest_gap_receive_s": fault_figures.longest_gap_s(rows["timeline"], "received"),
        **_latency_flat(results, rid, WHOLE),
        **oor,
        **{f"delivery_{d}": totals[d] for d in DELIVERY},
        **context,
        "unknown": json.dumps(unknown, sort_keys=True),
        "bad_lines": sum(1 for p in problems if p[1] is not None),
        "missing_files": sum(1 for p in problems if p[1] is None),
        "summarized_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if unknown and run["status"] == "complete":
        run["status"] = "partial"
    violations, failures = order_figures(meta.order_requirement, totals["reordered"])
    run["order_violations"] = violations
    run["failures"] = json.dumps(failures)
    for text in failures:
        rows["problems"].append(
            {
                "run_id": rid,
                "file": str(Path(meta.run_dir) / layout.SCENARIO),
                "line": None,
                "problem": text,
            }
        )
    if failures:
        run["status"] = FAILED
    rows["runs"].append(run)
    return {t: pa.Table.from_pylist(rows[t], schema=SCHEMAS[t]) for t in TABLES}


def fractions(run: dict[str, Any]) -> dict[str, float | None]:
    """Each of Jepsen's figures over the attempts (messages sent); None when unknown or
    nothing was sent."""
    sent = run.get("delivery_sent")
    out: dict[str, float | None] = {}
    for k in CHECKER:
        v = run.get(f"delivery_{k}")
        out[k] = None if v is None or not sent else v / sent
    return out


def as_summary(run: dict[str, Any], faults: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """``summary.json`` of one ``runs`` row and its ``faults`` rows (the same figures,
    nested)."""
    return {
        "format_version": FORMAT_VERSION,
        "run_id": run["run_id"],
        "status": run["status"],
        # workload.queues, only when several: a one-queue run's summary.json stays as
        # summaries always were (absent reads as 1)
        **({"queues": run["queues"]} if (run.get("queues") or 1) > 1 else {}),
        "measured": {
            "warmup_end_ms": run["warmup_end_ms"],
            **{
                name: {x: run[f"{name}_{x}"] for x in ("start_ms", "end_ms", "period_s")}
                for _, name in ROLES
            },
        },
        "throughput": {n: run[n] for n in THROUGHPUT},
        "sender_lag_ms_max": run["sender_lag_ms_max"],
        "stand_in": run.get("stand_in") or None,
        "order": {
            "requirement": run.get("order_requirement") or "any",
            "violations": run.get("order_violations"),
        },
        "failures": json.loads(run.get("failures") or "[]"),
        "saturation": json.loads(run.get("saturation") or "null"),
        "longest_gap_s": {
            "send": run.get("longest_gap_send_s"),
            "receive": run.get("longest_gap_receive_s"),
        },
        "faults": [{k: v for k, v in f.items() if k != "run_id"} for f in faults],
        "latency_us": {m: {f: run[f"{m}_{f}"] for f in FIGURES} for m in METRICS},
        "latency_out_of_range": {m: {o: run[f"{m}_{o}"] for o in OUT_OF_RANGE} for m in METRICS},
        "delivery": {d: run[f"delivery_{d}"] for d in DELIVERY},
        "delivery_fractions": fractions(run),
        "unknown": json.loads(run["unknown"] or "{}"),
        "problems": {"bad_lines": run["bad_lines"], "missing_files": run["missing_files"]},
        "clock_bound_ms": run.get("clock_bound_ms"),
        "clock_budget_ms": run.get("clock_budget_ms"),
        "clock_within_budget": run.get("clock_within_budget"),
        "clock": {
            "method": run.get("clock_method"),
            "hosts": json.loads(run.get("clock_hosts") or "{}"),
        },
        "lab": {
            "kind": run.get("lab_kind"),
            "name": run.get("lab_name"),
            "price_per_hour_usd": run.get("price_per_hour_usd"),
        },
        "run_hours": run.get("run_hours"),
        "cost_usd": run.get("cost_usd"),
        "cost_per_million_delivered_usd": run.get("cost_per_million_delivered_usd"),
        "context_unknown": json.loads(run.get("context_unknown") or "{}"),
    }
