"""The per-file and per-key work of the summary job, as plain functions.

``spark/summarize.py`` runs :func:`process_task` in executors (one task = one
raw file of a run), groups the emitted ``(key, partial)`` pairs by key and runs
:func:`finalize` on each group, again in executors. Only small figure rows
reach the driver. The same functions run without Spark in unit tests.

Keys:
- ``("lat", run_id, metric, window)``: an encoded histogram (window -1 = measured period)
- ``("cnt", run_id, role, window)``: (count, end ms of the last interval with count > 0)
- ``("dlv", run_id, sender_id)``: one worker's record for that sender id
- ``("rdl", run_id)``: redelivered messages from the receivers' worker.json
- ``("prb", run_id)``: problems found (file, line, problem)
- ``("log", file, tag)``: for ``--logs``: histogram and time span of one file and tag
"""

from __future__ import annotations

import base64
import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from hdrh.histogram import HdrHistogram
from pyroaring import BitMap

from mqlab.results import hlog
from mqlab.workload.recorder import COUNT_COLUMNS

WHOLE = -1  # the window number of the whole measured period
Key = tuple[Any, ...]


@dataclass(frozen=True)
class Task:
    """One raw file to read. kind: hlog | counts | sent | delivery | worker | logfile."""

    kind: str
    run_id: str
    path: str
    metric: str = ""  # hlog: metric; counts: role (sender | receiver)
    warmup_end_ms: int = 0
    window_ms: int = 60_000


def _encode(h: HdrHistogram) -> bytes:
    return bytes(h.encode())


def process_task(task: Task) -> Iterator[tuple[Key, Any]]:
    if task.kind in ("hlog", "logfile"):
        yield from _process_hlog(task)
    elif task.kind == "counts":
        yield from _process_counts(task)
    elif task.kind in ("sent", "delivery"):
        yield from _process_delivery(task)
    elif task.kind == "worker":
        yield from _process_worker(task)
    else:
        raise ValueError(f"unknown task kind {task.kind}")


def _problem(task: Task, line: int | None, text: str) -> tuple[Key, Any]:
    return ("prb", task.run_id), [(task.path, line, text)]


def _process_hlog(task: Task) -> Iterator[tuple[Key, Any]]:
    lines, missing = hlog.read_lines(task.path)
    if lines is None:
        assert missing is not None
        yield _problem(task, None, missing.problem)
        return
    accs: dict[Any, HdrHistogram | None] = {}
    spans: dict[Any, list[int]] = {}
    for item in hlog.parse_log(task.path, lines):
        if isinstance(item, hlog.LogHeader):
            continue
        if isinstance(item, hlog.Problem):
            yield _problem(task, item.line, item.problem)
            continue
        if task.kind == "hlog":
            if item.start_ms < task.warmup_end_ms:
                continue
            group: Any = (item.start_ms - task.warmup_end_ms) // task.window_ms
        else:
            group = item.tag
        try:
            hist = hlog.decode(item.payload)
        except ValueError as err:
            yield _problem(task, item.line, str(err))
            continue
        try:
            accs[group] = hlog.merge_into(accs.get(group), hist)
        except IndexError as err:
            yield _problem(task, item.line, f"histogram does not fit: {err}")
            continue
        span = spans.setdefault(group, [item.start_ms, item.end_ms, 0])
        span[0] = min(span[0], item.start_ms)
        span[1] = max(span[1], item.end_ms)
        span[2] += 1
    if task.kind == "logfile":
        for tag, acc in accs.items():
            assert acc is not None
            yield ("log", task.path, tag), (_encode(acc), *spans[tag])
        return
    whole: HdrHistogram | None = None
    for w in sorted(accs):
        acc = accs[w]
        assert acc is not None
        encoded = _encode(acc)
        yield ("lat", task.run_id, task.metric, w), encoded
        if whole is None:
            whole = hlog.decode(encoded.decode("ascii"))
        else:
            whole.add(acc)
    if whole is not None:
        yield ("lat", task.run_id, task.metric, WHOLE), _encode(whole)




def _process_counts(task: Task) -> Iterator[tuple[Key, Any]]:
    role = task.metric
    column = "confirmed" if role == "sender" else "received"
    try:
        with open(task.path, newline="") as f:
            text = f.read()
    except OSError as err:
        yield _problem(
            task,
            None,
            "missing file" if isinstance(err, FileNotFoundError) else f"unreadable: {err}",
        )
        return
    sums: dict[int, list[int]] = {}
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != COUNT_COLUMNS:
        yield _problem(task, 1, f"header is not {','.join(COUNT_COLUMNS)}")
        return
    for row in reader:
        if not row:
            continue
        try:
            rec = dict(zip(COUNT_COLUMNS, (int(x) for x in row), strict=True))
        except ValueError:
            yield _problem(task, reader.line_num, "not 8 integer fields (truncated or corrupt)")
            continue
        if rec["start_ms"] < task.warmup_end_ms:
            continue
        end = rec["start_ms"] + rec["length_ms"]
        n = rec[column]
        w = (rec["start_ms"] - task.warmup_end_ms) // task.window_ms
        for key in (w, WHOLE):
            acc = sums.setdefault(key, [0, 0])
            acc[0] += n
            if n > 0:
                acc[1] = max(acc[1], end)
    for w, (n, last_end) in sums.items():
        yield ("cnt", task.run_id, role, w), (n, last_end)


def _process_delivery(task: Task) -> Iterator[tuple[Key, Any]]:
    try:
        with open(task.path) as f:
            doc = json.load(f)
        senders = doc["senders"]
        version = doc.get("format_version")
    except FileNotFoundError:
        yield _problem(task, None, "missing file")
        return
    except (OSError, ValueError, KeyError, TypeError) as err:
        yield _problem(task, None, f"not a {task.kind}.json: {err}")
        return
    if version != 1:
        yield _problem(task, None, f"format_version {version!r} (accepted: 1)")
        return
    for sid, rec in senders.items():
        try:
            if task.kind == "sent":
                part = {
                    "sent": int(rec["sent"]),
                    "confirmed": int(rec["confirmed"]),
                    "failed": int(rec["failed"]),
                    "confirmed_bitmap": base64.b64decode(rec["confirmed_bitmap"]),
                }
            else:
                part = {
                    "received": int(rec["received"]),
                    "redelivered": int(rec["redelivered"]),
                    "reordered": int(rec["reordered"]),
                    "bitmap": base64.b64decode(rec["bitmap"]),
                }
        except (KeyError, ValueError, TypeError) as err:
            yield _problem(task, None, f"sender {sid}: bad record: {err}")
            continue
        yield ("dlv", task.run_id, int(sid)), part


def _process_worker(task: Task) -> Iterator[tuple[Key, Any]]:
    """A receiver's worker.json: its total of redelivered messages (as summary.json counts)."""
    try:
        with open(task.path) as f:
            doc = json.load(f)
        redelivered = int((doc.get("messages") or {}).get("redelivered", 0))
    except FileNotFoundError:
        yield _problem(task, None, "missing file")
        return
    except (OSError, ValueError, TypeError, AttributeError) as err:
        yield _problem(task, None, f"not a worker.json: {err}")
        return
    yield ("rdl", task.run_id), redelivered


def finalize(key: Key, parts: Iterable[Any]) -> tuple[Key, Any]:
    """Merge every partial of one key into its final figures (runs in executors)."""
    kind = key[0]
    if kind == "lat":
        acc: HdrHistogram | None = None
        for p in parts:
            acc = hlog.merge_into(acc, hlog.decode(p.decode("ascii")))
        out: dict[str, Any] = dict(hlog.figures(acc))
        if key[3] == WHOLE and acc is not None:
            out["histogram"] = _encode(acc).decode("ascii")
        return key, out
    if kind == "cnt":
        n = last = 0
        for c, e in parts:
            n += c
            last = max(last, e)
        return key, (n, last)
    if kind == "rdl":
        return key, sum(parts)
    if kind == "dlv":
        return key, _merge_delivery(list(parts))
    if kind == "prb":
        return key, sorted((x for p in parts for x in p), key=lambda t: (t[0], t[1] or 0))
    if kind == "log":
        acc = None
        first_ms: int | None = None
        last_ms: int | None = None
        intervals = 0
        for payload, s, e, k in parts:
            acc = hlog.merge_into(acc, hlog.decode(payload.decode("ascii")))
            first_ms = s if first_ms is None else min(first_ms, s)
            last_ms = e if last_ms is None else max(last_ms, e)
            intervals += k
        return key, {
            **hlog.figures(acc),
            "start_ms": first_ms,
            "end_ms": last_ms,
            "intervals": intervals,
        }
    raise ValueError(f"unknown key {key!r}")


def _merge_delivery(parts: list[dict[str, Any]]) -> dict[str, int]:
    confirmed_bm = BitMap()
    union = BitMap()
    out = dict.fromkeys(("sent", "confirmed", "failed", "received", "redelivered", "reordered"), 0)
    for p in parts:
        for k in out:
            out[k] += p.get(k, 0)
        if "confirmed_bitmap" in p:
            confirmed_bm |= BitMap.deserialize(p["confirmed_bitmap"])
        if "bitmap" in p:
            union |= BitMap.deserialize(p["bitmap"])
    out["unique_received"] = len(union)
    out["lost"] = len(confirmed_bm - union)
    out["duplicated"] = out["received"] - len(union)
    return out


def run_locally(tasks: Iterable[Task]) -> dict[Key, Any]:
    """The job without Spark: same functions, one process (for tests and tiny inputs)."""
    groups: dict[Key, list[Any]] = {}
    for t in tasks:
        for k, v in process_task(t):
            groups.setdefault(k, []).append(v)
    return dict(finalize(k, v) for k, v in groups.items())
