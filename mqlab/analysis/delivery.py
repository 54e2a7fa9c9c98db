"""A run's delivery figures from the job's finalized partials: the totals and per-sender
rows of what was sent, confirmed, received, lost, undrained and duplicated (the Jepsen
checker's figures), the messages sent in each fault, and latencies out of range. A figure
that depends on a missing or unreadable file is null, and ``unknown`` says why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyroaring import BitMap64

from mqlab.analysis.partials import Key
from mqlab.analysis.plan import RunMeta
from mqlab.analysis.schema import DELIVERY, OUT_OF_RANGE, RECEIVED_FIELDS, SENT_FIELDS
from mqlab.archive import codecs
from mqlab.archive.layout import METRICS


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
    # what the broker still holds counts only for confirmed messages never received: with
    # none (every confirmed one received), lost is 0 whatever is left there
    if (
        und is not None
        and und["count"]
        and not identified
        and "lost" not in unknown
        and unaccounted_total
    ):
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
