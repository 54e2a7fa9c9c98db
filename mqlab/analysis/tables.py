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

import datetime as dt
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyroaring import BitMap64

from mqlab.analysis import faults as fault_figures
from mqlab.analysis import saturation
from mqlab.analysis.figures import FIGURES
from mqlab.analysis.partials import TIMELINE_FIGURES, TIMELINE_METRICS, WHOLE, Key, Span
from mqlab.analysis.plan import RunMeta
from mqlab.archive import codecs, layout
from mqlab.archive.formats import FORMAT_VERSION
from mqlab.archive.layout import METRICS

THROUGHPUT = ("send_msgs_per_s", "receive_msgs_per_s", "send_mb_per_s", "receive_mb_per_s")
DELIVERY = (
    "sent",
    "confirmed",
    "failed",
    "unsent",
    "received",
    "first_received",
    "unique_received",
    "lost",
    "undrained",
    "duplicated",
    "reordered",
    "redelivered",
    "foreign",
    "recovered",
    "unexpected",
)
# Jepsen's total-queue figures, each also as a fraction of the attempts (messages sent)
CHECKER = ("lost", "unexpected", "duplicated", "recovered")
SENT_FIELDS = ("sent", "confirmed", "failed", "unsent")
RECEIVED_FIELDS = ("received", "first_received", "redelivered", "reordered")
OUT_OF_RANGE = ("below_zero", "above_max")
TABLES = ("runs", "windows", "timeline", "latency", "delivery", "problems", "faults")
ROLES = (("sender", "send"), ("receiver", "receive"))


def _fig_type(fig: str) -> pa.DataType:
    return pa.float64() if fig == "mean" else pa.int64()


_LAT_FIELDS = [pa.field(f"{m}_{f}", _fig_type(f)) for m in METRICS for f in FIGURES]
_TP_FIELDS = [pa.field(n, pa.float64()) for n in THROUGHPUT]
_PERIOD_FIELDS = [
    pa.field(f"{name}_{x}", t)
    for _, name in ROLES
    for x, t in (("start_ms", pa.int64()), ("end_ms", pa.int64()), ("period_s", pa.float64()))
]
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
    pa.field("sender_processes", pa.int64()),  # per node; threads are per process
    pa.field("receiver_processes", pa.int64()),
    pa.field("queues", pa.int64()),  # workload.queues; null (read as 1) in older summaries
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
_CONTEXT_FIELDS = [
    pa.field("clock_method", pa.string()),
    pa.field("clock_bound_ms", pa.float64()),
    pa.field("clock_budget_ms", pa.float64()),
    pa.field("clock_within_budget", pa.bool_()),
    pa.field("clock_hosts", pa.string()),  # JSON: host -> {offset_ms, bound_ms, drift_ms}
    pa.field("lab_kind", pa.string()),
    pa.field("lab_name", pa.string()),
    pa.field("price_per_hour_usd", pa.float64()),
    pa.field("run_hours", pa.float64()),
    pa.field("cost_usd", pa.float64()),
    pa.field("cost_per_million_delivered_usd", pa.float64()),
    pa.field("context_unknown", pa.string()),  # JSON: {context figure: why it is null}
]
CONTEXT = tuple(f.name for f in _CONTEXT_FIELDS)
_META = {b"format_version": str(FORMAT_VERSION).encode()}
SCHEMAS: dict[str, pa.Schema] = {
    "runs": pa.schema(
        [
            pa.field("format_version", pa.int64()),
            *_META_FIELDS,
            pa.field("window_s", pa.float64()),
            *_TP_FIELDS,
            *_PERIOD_FIELDS,
            pa.field("sender_lag_ms_max", pa.int64()),
            # what served instead of the real system ("" for the real one): marked
            pa.field("stand_in", pa.string()),
            # workload.order ("any" | "strict") and, under "strict", the messages received
            # out of order (delivery_reordered; null under "any" or when unknown)
            pa.field("order_requirement", pa.string()),
            pa.field("order_violations", pa.int64()),
            # JSON list: the requirements the run failed, one line each (status "failed")
            pa.field("failures", pa.string()),
            # was the load generator the bottleneck (mqlab.analysis.saturation)
            pa.field("client_bound", pa.bool_()),
            pa.field("receivers_behind", pa.bool_()),
            pa.field("client_cpu_max", pa.float64()),  # the busiest client node's cores
            pa.field("broker_cpu_max", pa.float64()),
            pa.field("shared_cores", pa.bool_()),
            pa.field("saturation", pa.string()),  # JSON: summary.json's saturation section
            pa.field("longest_gap_send_s", pa.int64()),
            pa.field("longest_gap_receive_s", pa.int64()),
            *_LAT_FIELDS,
            *[pa.field(f"{m}_{o}", pa.int64()) for m in METRICS for o in OUT_OF_RANGE],
            *[pa.field(f"delivery_{d}", pa.int64()) for d in DELIVERY],
            *_CONTEXT_FIELDS,
            pa.field("unknown", pa.string()),  # JSON: {figure: why it is null}
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
            pa.field("sender_lag_ms_max", pa.int64()),
            *_LAT_FIELDS,
        ],
        metadata=_META,
    ),
    "timeline": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("second_ms", pa.int64()),
            pa.field("confirmed", pa.int64()),
            pa.field("received", pa.int64()),
            pa.field("failed", pa.int64()),
            pa.field("unsent", pa.int64()),
            pa.field("backlog", pa.int64()),
            pa.field("sender_lag_ms", pa.int64()),
            # deliveries of a message the receiver node had had before (received minus
            # first copies minus foreign messages)
            pa.field("repeats", pa.int64()),
            *[pa.field(f"{m}_{f}", pa.int64()) for m in TIMELINE_METRICS for f in TIMELINE_FIGURES],
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
            *[pa.field(d, pa.int64()) for d in DELIVERY if d != "foreign"],
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
    # one row per fault of the run (mqlab.analysis.faults)
    "faults": pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("fault_index", pa.int64()),
            pa.field("action", pa.string()),
            pa.field("kind", pa.string()),  # a partition's kind, else ""
            pa.field("node", pa.int64()),
            pa.field("label", pa.string()),
            pa.field("start_ms", pa.int64()),
            pa.field("end_ms", pa.int64()),
            pa.field("unavailable_send_s", pa.int64()),
            pa.field("unavailable_receive_s", pa.int64()),
            pa.field("send_p99_recovered_s", pa.int64()),
            pa.field("processing_p99_recovered_s", pa.int64()),
            pa.field("failed", pa.int64()),
            pa.field("repeats", pa.int64()),
            # messages handed to send() in the fault's seconds, and what became of them
            pa.field("sent", pa.int64()),
            pa.field("lost", pa.int64()),
            pa.field("recovered", pa.int64()),
            pa.field("duplicated", pa.int64()),  # of them delivered more than once
        ],
        metadata=_META,
    ),
}


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


# -- delivery -----------------------------------------------------------------------
def _workers_without(results: dict[Key, Any], meta: RunMeta, role: str, kind: str) -> list[str]:
    ok = results.get(("ok", meta.run_id, kind), set())
    return [wid for wid, r in meta.workers if r == role and wid not in ok]


def delivery_figures(
    results: dict[Key, Any], meta: RunMeta
) -> tuple[dict[str, int | None], list[dict[str, Any]], dict[str, str]]:
    """Run totals, per-sender rows, and {figure: why unknown} for the null figures."""
    rid = meta.run_id
    unknown: dict[str, str] = {}
    no_sent = _workers_without(results, meta, "sender", "sent")
    no_dlv = _workers_without(results, meta, "receiver", "delivery")
    und = results.get(("und", rid))
    if no_sent:
        why = f"sent.json of {', '.join(no_sent)} missing or unreadable"
        unknown.update(dict.fromkeys(SENT_FIELDS, why))
    if no_dlv:
        why = f"delivery.json of {', '.join(no_dlv)} missing or unreadable"
        unknown.update(
            dict.fromkeys((*RECEIVED_FIELDS, "unique_received", "duplicated", "foreign"), why)
        )
    if no_sent or no_dlv:
        unknown.update(
            dict.fromkeys(
                ("recovered", "unexpected"),
                "; ".join(dict.fromkeys(unknown[k] for k in ("sent", "received") if k in unknown)),
            )
        )
    und_seqs: dict[int, BitMap64] = {}
    if und is None:
        unknown["undrained"] = "undrained.json missing or unreadable"
        unknown.setdefault("foreign", unknown["undrained"])
    elif und["count"] is None:
        unknown["undrained"] = f"the broker could not be asked: {und['error']}"
    else:
        und_seqs = {int(s): codecs.decode_bitmap(b) for s, b in und["senders"].items()}
    if no_sent or no_dlv or "undrained" in unknown:
        unknown["lost"] = "; ".join(
            dict.fromkeys(unknown[k] for k in ("sent", "received", "undrained") if k in unknown)
        )
    sids = sorted({k[2] for k in results if k[0] in ("snt", "rcv") and k[1] == rid})
    identified = (
        und is not None and und["count"] is not None and (und["identified"] or und["count"] == 0)
    )
    rows = []
    unaccounted_total = 0
    for sid in sids:
        s = results.get(("snt", rid, sid))
        r = results.get(("rcv", rid, sid))
        row: dict[str, Any] = {"run_id": rid, "sender_id": sid}
        for f in SENT_FIELDS:
            row[f] = s[f] if s else 0
        for f in RECEIVED_FIELDS:
            row[f] = r[f] if r else 0
        confirmed = codecs.decode_bitmap(s["confirmed_bitmap"]) if s else BitMap64()
        seen = codecs.decode_bitmap(r["bitmap"]) if r else BitMap64()
        held = und_seqs.get(sid, BitMap64())
        unaccounted = confirmed - seen
        unaccounted_total += len(unaccounted)
        row["unique_received"] = len(seen)
        row["duplicated"] = row["received"] - len(seen)
        row["undrained"] = len(held) if identified else None
        row["lost"] = len(unaccounted - held)
        attempted = BitMap64()  # seqs 0 .. sent-1: every message handed to send()
        attempted.add_range(0, int(row["sent"]))
        # delivered though its send failed or never returned (Jepsen's "recovered"), and
        # delivered though never sent (Jepsen's "unexpected")
        row["recovered"] = len((seen & attempted) - confirmed)
        row["unexpected"] = len(seen - attempted)
        rows.append(row)
    if und is not None and und["count"] and not identified and "lost" not in unknown:
        unknown["lost"] = (
            f"{und['count']} messages still in the broker could not be identified (it cannot "
            f"be read without consuming them); lost is between 0 and {unaccounted_total}"
        )
    summed = (
        *SENT_FIELDS,
        *RECEIVED_FIELDS,
        "unique_received",
        "duplicated",
        "lost",
        "recovered",
        "unexpected",
    )
    totals: dict[str, int | None] = dict.fromkeys(DELIVERY, 0)
    for row in rows:
        for f in summed:
            totals[f] = (totals[f] or 0) + row[f]
    totals["undrained"] = und["count"] if und is not None else None
    wrk = results.get(("wrk", rid), {})
    totals["foreign"] = sum(int(w.get("delivery_foreign", 0)) for w in wrk.values()) + (
        int(und["foreign"]) if und is not None else 0
    )
    for f in unknown:
        totals[f] = None
        for row in rows:
            if f in row:
                row[f] = None
    return totals, rows, unknown


def fault_messages(
    results: dict[Key, Any],
    meta: RunMeta,
    fault_rows: Sequence[dict[str, Any]],
    unknown: dict[str, str],
) -> list[dict[str, int | None]]:
    """Per fault: the messages handed to send() in its seconds (from the senders' marks,
    the first seq of every second), how many of them were lost and how many recovered
    (as in the run's totals, restricted to those seqs), and how many were delivered more
    than once (again to one receiver node, or to two). Unknown (None) where the run's own
    figure is unknown or a sender has no marks (archives from before marks), and
    duplicated where a receiver's record predates the seqs it got again."""
    rid = meta.run_id
    sids = sorted({k[2] for k in results if k[0] in ("snt", "rcv") and k[1] == rid})
    snt = {sid: results.get(("snt", rid, sid)) for sid in sids}
    no_marks = any(s is not None and s.get("marks") is None for s in snt.values())
    und = results.get(("und", rid))
    held = (
        {int(s): codecs.decode_bitmap(b) for s, b in und["senders"].items()}
        if und is not None and und.get("count") is not None
        else {}
    )
    # each sender's bitmaps decoded once, for every fault: (marks, sent, confirmed, seen,
    # delivered more than once or None when unknown)
    per_sender: dict[int, tuple[list[Any], int, BitMap64, BitMap64, BitMap64 | None]] = {}
    if not no_marks:
        for sid in sids:
            s = snt[sid]
            if s is None:
                continue
            r = results.get(("rcv", rid, sid))
            multi = r.get("multi_bitmap") if r else ""
            per_sender[sid] = (
                sorted(s["marks"]),
                s["sent"],
                codecs.decode_bitmap(s["confirmed_bitmap"]),
                codecs.decode_bitmap(r["bitmap"]) if r else BitMap64(),
                None if multi is None else codecs.decode_bitmap(multi) if multi else BitMap64(),
            )
    out: list[dict[str, int | None]] = []
    for f in fault_rows:
        if no_marks or "sent" in unknown:
            out.append({"sent": None, "lost": None, "recovered": None, "duplicated": None})
            continue
        start = f["start_ms"] // 1000 * 1000
        end = None if f["end_ms"] is None else f["end_ms"] // 1000 * 1000
        sent_n, lost, recovered = 0, 0, 0
        duplicated: int | None = 0
        for sid, (marks, sent, all_confirmed, seen, again) in per_sender.items():
            lo = next((q for sec, q in marks if sec >= start), None)
            if lo is None:
                continue
            hi = next((q for sec, q in marks if end is not None and sec > end), sent)
            window = BitMap64()
            window.add_range(lo, hi)
            sent_n += hi - lo
            confirmed = all_confirmed & window
            lost += len(confirmed - seen - held.get(sid, BitMap64()))
            recovered += len((seen & window) - confirmed)
            if again is None or duplicated is None:
                duplicated = None
            else:
                duplicated += len(again & window)
        out.append(
            {
                "sent": sent_n,
                "lost": None if "lost" in unknown else lost,
                "recovered": None if "recovered" in unknown else recovered,
                "duplicated": None if "duplicated" in unknown else duplicated,
            }
        )
    return out


def out_of_range(results: dict[Key, Any], meta: RunMeta) -> dict[str, int | None]:
    wrk = results.get(("wrk", meta.run_id), {})
    out: dict[str, int | None] = {}
    for m in METRICS:
        role = "sender" if m.startswith("send") else "receiver"
        ids = [wid for wid, r in meta.workers if r == role]
        known = all("out_of_range" in wrk.get(wid, {}) for wid in ids)
        for o in OUT_OF_RANGE:
            out[f"{m}_{o}"] = (
                sum(int(wrk[wid]["out_of_range"].get(m, {}).get(o, 0)) for wid in ids)
                if known
                else None
            )
    return out


# -- the run's context: clocks and cost ------------------------------------------------
CLOCK_PROBLEM = "clock error bound "  # how the problem line of a run over budget starts


def clock_problem(bound_ms: float, budget_ms: float) -> str:
    """The ``problems`` line of a run whose clock error bound exceeds its budget."""
    return (
        f"{CLOCK_PROBLEM}{bound_ms:g} ms exceeds the budget {budget_ms:g} ms: end-to-end "
        "latencies between hosts are uncertain by that much"
    )


def _instant(text: str) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def run_hours(started_at: str, ended_at: str) -> float | None:
    """The run's wall time in hours (manifest ``ended_at - started_at``); None when either
    is missing or the end is before the start."""
    start, end = _instant(started_at or ""), _instant(ended_at or "")
    if start is None or end is None or end < start:
        return None
    return (end - start).total_seconds() / 3600


def cost_figures(
    meta: RunMeta, delivered: int | None, delivered_why: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """(``run_hours``, ``cost_usd``, ``cost_per_million_delivered_usd``; {figure: why
    null}). cost_usd = price per hour x run hours; per million delivered = cost_usd /
    (``delivered`` / 1e6), ``delivered`` being the unique messages received. Rounded to
    1e-6 USD."""
    hours = run_hours(meta.started_at, meta.ended_at)
    out: dict[str, Any] = {
        "run_hours": None if hours is None else round(hours, 6),
        "cost_usd": None,
        "cost_per_million_delivered_usd": None,
    }
    why: dict[str, str] = {}
    price = meta.price_per_hour_usd
    if price is None:
        why["cost_usd"] = f"the lab ({meta.lab_kind or 'local'}) has no price per hour"
    elif hours is None:
        why["cost_usd"] = "the manifest lacks the run's start or end time"
    if "cost_usd" in why:
        why["cost_per_million_delivered_usd"] = why["cost_usd"]
        return out, why
    assert price is not None and hours is not None
    cost = price * hours
    out["cost_usd"] = round(cost, 6)
    if delivered is None:
        why["cost_per_million_delivered_usd"] = (
            f"messages delivered unknown: {delivered_why or 'not in the summary'}"
        )
    elif delivered == 0:
        why["cost_per_million_delivered_usd"] = "no message was delivered"
    else:
        out["cost_per_million_delivered_usd"] = round(cost / (delivered / 1e6), 6)
    return out, why


def context_figures(
    meta: RunMeta, totals: dict[str, int | None], unknown: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``runs`` columns of the run's context (clock, lab, cost) and {figure: why it
    is null}."""
    cost, why = cost_figures(meta, totals["unique_received"], unknown.get("unique_received"))
    if meta.clock_bound_ms is None:
        why["clock_bound_ms"] = meta.clock_unknown or "not in the manifest"
    return {**cost, "context_unknown": json.dumps(why, sort_keys=True)}, why


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
    )
    return {
        "client_bound": section["client_bound"],
        "receivers_behind": section["receivers_behind"],
        "client_cpu_max": section["client_cpu_max"],
        "broker_cpu_max": section["broker_cpu_max"],
        "shared_cores": section["shared_cores"],
        "saturation": saturation.as_json(section),
    }


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


FAILED = "failed"  # the status of a run that broke a requirement of its scenario


def order_problem(violations: int) -> str:
    """The ``problems`` (and ``failures``) line of a strict-order run that reordered."""
    return f"reordered {violations:,} messages under a strict order requirement"


def order_figures(requirement: str, reordered: int | None) -> tuple[int | None, list[str]]:
    """(``order_violations``, the failures it makes). Under ``workload.order = "strict"``
    every message a receiver thread got out of its sender's order (``delivery_reordered``:
    first deliveries out of place, n - LIS per receiver thread and sender) violates the
    requirement, and any violation fails the run; an unknown count fails nothing (the
    run is partial already). Under "any" there is no requirement: None."""
    if requirement != "strict":
        return None, []
    if reordered is None or reordered == 0:
        return reordered, []
    return reordered, [order_problem(reordered)]


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
