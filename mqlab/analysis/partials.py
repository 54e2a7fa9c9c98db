"""The per-file and per-key work of the summary, as plain functions.

``spark/summarize.py`` runs :func:`process_task` in executors (one task = one raw
file of a run), groups the emitted ``(key, partial)`` pairs by key and runs
:func:`finalize` on each group, again in executors; :func:`run_locally` runs the
very same functions in one process (the summary ``mqlab run`` writes). Only small
figure rows reach the driver.

Keys:
- ``("lat", run_id, metric, window)``: an encoded histogram (window -1 = measured period)
- ``("tlh", run_id, metric, second_ms)``: the histogram of one second (timeline)
- ``("cnt", run_id, role, window)``: :class:`Span` of the role's counted intervals
- ``("tlc", run_id, role, second_ms)``: the role's counters of one second (timeline)
- ``("snt", run_id, sender_id)``: one sender's sent.json record
- ``("rcv", run_id, sender_id)``: one receiver node's delivery.json record of that sender
- ``("cpu", run_id, worker_id)``: ``[start_ms, length_ms, cpu_us]`` of each interval of
  a worker's (or a broker node's, ``broker-NN``) cpu.csv from the warm-up end on
- ``("wrk", run_id)``: per worker id: status, foreign, out-of-range counts, node, cores
- ``("und", run_id)``: the run's undrained.json record
- ``("bsy", run_id, second_ms)``: ``[start_ms, end_ms, batches, busy_us]`` of the
  senders' confirmed batches in the measured intervals of one second: how many, and the
  sum of their send latencies (count x mean of each ``send_call_us`` interval)
- ``("ok", run_id, kind)``: worker ids whose ``kind`` record (sent, delivery) was read,
  or (``send_call_us``) whose send latency log was
- ``("prb", run_id)``: problems found (file, line, problem)
- ``("log", file, tag)``: for ``--logs``: histogram and time span of one file and tag
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from hdrh.histogram import HdrHistogram
from pyroaring import BitMap64

from mqlab.analysis.figures import figures
from mqlab.archive import codecs, hlog, records
from mqlab.archive.codecs import COUNT_FIELDS, COUNTED
from mqlab.errors import ArchiveError

WHOLE = -1  # the window number of the whole measured period
# an interval with no values (workers write one every second): merging it changes nothing
EMPTY_PAYLOAD = codecs.new_histogram().encode().decode("ascii")
TIMELINE_METRICS = ("send_msg_us", "processing_us")
TIMELINE_FIGURES = ("count", "p50", "p99", "max")
BUSY_METRIC = "send_call_us"  # one value per confirmed batch: its latency (Little's law)
Key = tuple[Any, ...]
Row = TypeVar("Row")


@dataclass(frozen=True)
class Task:
    """One raw file to read.

    kind: hlog | counts | cpu | sent | delivery | worker | undrained | logfile."""

    kind: str
    run_id: str
    path: str
    metric: str = ""  # hlog: metric; counts: role (sender | receiver)
    warmup_end_ms: int = 0
    window_ms: int = 60_000
    worker_id: str = ""


@dataclass
class Span:
    """A role's counted intervals in one window: messages, the first interval's start,
    the last interval's end, the last counted event and the largest sender lag."""

    n: int = 0
    first_start_ms: int | None = None
    last_end_ms: int = 0
    last_event_ms: int = 0
    lag_ms: int = 0

    def add(self, other: Span) -> None:
        self.n += other.n
        if other.first_start_ms is not None:
            self.first_start_ms = (
                other.first_start_ms
                if self.first_start_ms is None
                else min(self.first_start_ms, other.first_start_ms)
            )
        self.last_end_ms = max(self.last_end_ms, other.last_end_ms)
        self.last_event_ms = max(self.last_event_ms, other.last_event_ms)
        self.lag_ms = max(self.lag_ms, other.lag_ms)


def _encode(h: HdrHistogram) -> bytes:
    return bytes(h.encode())


def process_task(task: Task) -> Iterator[tuple[Key, Any]]:
    handlers = {
        "hlog": _process_hlog,
        "logfile": _process_hlog,
        "counts": _process_counts,
        "cpu": _process_cpu,
        "sent": _process_sent,
        "delivery": _process_delivery,
        "worker": _process_worker,
        "undrained": _process_undrained,
    }
    if task.kind not in handlers:
        raise ValueError(f"unknown task kind {task.kind}")
    yield from handlers[task.kind](task)


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
    seconds: dict[int, list[hlog.Interval]] = {}  # the intervals of each second, as read
    unfit: set[int] = set()  # lines already reported as not fitting
    timeline = task.kind == "hlog" and task.metric in TIMELINE_METRICS
    busy = task.kind == "hlog" and task.metric == BUSY_METRIC
    if busy:
        yield ("ok", task.run_id, BUSY_METRIC), {task.worker_id}
    for item in hlog.parse_log(task.path, lines):
        if isinstance(item, hlog.LogHeader):
            continue
        if isinstance(item, hlog.Problem):
            yield _problem(task, item.line, item.problem)
            continue
        empty = item.payload == EMPTY_PAYLOAD
        if not empty:
            try:
                hist = hlog.decode(item.payload)
            except ValueError as err:
                yield _problem(task, item.line, str(err))
                continue
        if timeline:  # every second of the run, warm-up included
            seconds.setdefault(item.start_ms - item.start_ms % 1000, []).append(item)
        if task.kind == "hlog":
            if item.start_ms < task.warmup_end_ms:
                continue
            group: Any = (item.start_ms - task.warmup_end_ms) // task.window_ms
            if busy:
                n, mean = (0, 0.0) if empty else _count_mean(hist)
                second = item.start_ms - item.start_ms % 1000
                yield ("bsy", task.run_id, second), [item.start_ms, item.end_ms, n, n * mean]
        else:
            group = item.tag
        try:
            if not empty:
                accs[group] = hlog.merge_into(accs.get(group), hist)
            elif group not in accs:  # a group of empty intervals still has figures (zeros)
                accs[group] = hlog.decode(item.payload)
        except IndexError as err:
            unfit.add(item.line)
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
    for second, items in seconds.items():
        if len(items) == 1:  # the usual one interval a second: its payload as it is
            yield ("tlh", task.run_id, task.metric, second), items[0].payload.encode("ascii")
            continue
        merged: HdrHistogram | None = None
        for it in items:
            try:
                merged = hlog.merge_into(merged, hlog.decode(it.payload))
            except IndexError as err:
                if it.line not in unfit:
                    unfit.add(it.line)
                    yield _problem(task, it.line, f"histogram does not fit: {err}")
        if merged is not None:
            yield ("tlh", task.run_id, task.metric, second), _encode(merged)
    whole: HdrHistogram | None = None
    for w in sorted(accs):
        acc = accs[w]
        assert acc is not None
        encoded = _encode(acc)
        yield ("lat", task.run_id, task.metric, w), encoded
        if whole is None:  # a copy: the windows' accumulators are not changed
            whole = hlog.decode(encoded.decode("ascii"))
        else:
            whole.add(acc)
    if whole is not None:
        yield ("lat", task.run_id, task.metric, WHOLE), _encode(whole)


def _count_mean(hist: HdrHistogram) -> tuple[int, float]:
    f = figures(hist, ("count", "mean"))
    return int(f["count"]), float(f["mean"])


def _read_text(task: Task) -> str | None:
    try:
        return Path(task.path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def _parsed(
    task: Task, parse: Callable[[str], tuple[list[Row], list[tuple[int, str]]]]
) -> Generator[tuple[Key, Any], None, list[Row] | None]:
    """Yield a CSV file's problems (missing, unreadable, bad lines); return its rows, None
    when it could not be read."""
    text = _read_text(task)
    if text is None:
        exists = Path(task.path).exists()
        yield _problem(task, None, "unreadable file" if exists else "missing file")
        return None
    rows, problems = parse(text)
    for line, problem in problems:
        yield _problem(task, line, problem)
    return rows


def _process_counts(task: Task) -> Iterator[tuple[Key, Any]]:
    role = task.metric
    column = COUNTED[role]
    rows = yield from _parsed(task, codecs.parse_counts)
    if rows is None:
        return
    spans: dict[int, Span] = {}
    per_second: dict[int, dict[str, int]] = {}
    for r in rows:
        sec = per_second.setdefault(
            r.start_ms - r.start_ms % 1000, {**dict.fromkeys(COUNT_FIELDS, 0), "lag_ms": 0}
        )
        for k in COUNT_FIELDS:
            sec[k] += r.counts[k]
        sec["lag_ms"] = max(sec["lag_ms"], r.lag_ms)
        if r.start_ms < task.warmup_end_ms:
            continue
        part = Span(
            n=r.counts[column],
            first_start_ms=r.start_ms,
            last_end_ms=r.end_ms,
            last_event_ms=r.last_ms if r.counts[column] else 0,
            lag_ms=r.lag_ms,
        )
        w = (r.start_ms - task.warmup_end_ms) // task.window_ms
        for key in (w, WHOLE):
            spans.setdefault(key, Span()).add(part)
    for w, span in spans.items():
        yield ("cnt", task.run_id, role, w), span
    for second, c in per_second.items():
        yield ("tlc", task.run_id, role, second), c


def _process_cpu(task: Task) -> Iterator[tuple[Key, Any]]:
    rows = yield from _parsed(task, codecs.parse_cpu)
    if rows is None:
        return
    kept = [[r.start_ms, r.length_ms, r.cpu_us] for r in rows if r.start_ms >= task.warmup_end_ms]
    yield ("cpu", task.run_id, task.worker_id), kept


def _process_sent(task: Task) -> Iterator[tuple[Key, Any]]:
    try:
        senders = records.read_sent(task.path)
    except ArchiveError as err:
        yield _problem(task, None, _why(err, task.path))
        return
    for sid, rec in senders.items():
        yield ("snt", task.run_id, sid), rec.to_json()
    yield ("ok", task.run_id, "sent"), {task.worker_id}


def _process_delivery(task: Task) -> Iterator[tuple[Key, Any]]:
    try:
        rec = records.read_delivery(task.path)
    except ArchiveError as err:
        yield _problem(task, None, _why(err, task.path))
        return
    for sid, r in rec.senders.items():
        yield ("rcv", task.run_id, sid), r.to_json()
    yield ("wrk", task.run_id), {task.worker_id: {"delivery_foreign": rec.foreign}}
    yield ("ok", task.run_id, "delivery"), {task.worker_id}


def _process_worker(task: Task) -> Iterator[tuple[Key, Any]]:
    try:
        w = records.read_worker(task.path)
    except ArchiveError as err:
        yield _problem(task, None, _why(err, task.path))
        return
    yield (
        ("wrk", task.run_id),
        {
            task.worker_id: {
                "status": w.status,
                "out_of_range": w.out_of_range,
                "node": w.node,
                "cores": w.cores,
            }
        },
    )


def _process_undrained(task: Task) -> Iterator[tuple[Key, Any]]:
    try:
        rec = records.read_undrained(task.path)
    except ArchiveError as err:
        yield _problem(task, None, _why(err, task.path))
        return
    yield (
        ("und", task.run_id),
        {
            "count": rec.count,
            "in_flight": rec.in_flight,
            "identified": rec.identified,
            "foreign": rec.foreign,
            "error": rec.error,
            "senders": {sid: codecs.encode_bitmap(bm) for sid, bm in rec.senders.items()},
        },
    )


def _why(err: ArchiveError, path: str) -> str:
    text = str(err)
    return text[len(path) + 2 :] if text.startswith(path + ": ") else text


def finalize(key: Key, parts: Iterable[Any]) -> tuple[Key, Any]:
    """Merge every partial of one key into its final figures (runs in executors)."""
    kind = key[0]
    if kind in ("lat", "tlh"):
        acc: HdrHistogram | None = None
        for p in parts:
            acc = hlog.merge_into(acc, hlog.decode(p.decode("ascii")))
        if kind == "tlh":
            return key, figures(acc, TIMELINE_FIGURES)
        out: dict[str, Any] = figures(acc)
        if key[3] == WHOLE and acc is not None:
            out["histogram"] = _encode(acc).decode("ascii")
        return key, out
    if kind == "bsy":
        rows = list(parts)
        return key, [
            min(r[0] for r in rows),
            max(r[1] for r in rows),
            sum(r[2] for r in rows),
            sum(r[3] for r in rows),
        ]
    if kind == "cnt":
        total = Span()
        for s in parts:
            total.add(s)
        return key, total
    if kind == "tlc":
        merged: dict[str, int] = {}
        for c in parts:
            for k, v in c.items():
                merged[k] = max(merged.get(k, 0), v) if k == "lag_ms" else merged.get(k, 0) + v
        return key, merged
    if kind in ("snt", "rcv"):
        return key, _merge_records(kind, list(parts))
    if kind == "wrk":
        workers: dict[str, dict[str, Any]] = {}
        for p in parts:
            for wid, info in p.items():
                workers.setdefault(wid, {}).update(info)
        return key, workers
    if kind == "und":
        return key, next(iter(parts))
    if kind == "cpu":
        return key, sorted(row for p in parts for row in p)
    if kind == "ok":
        return key, set().union(*parts)
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
            **figures(acc),
            "start_ms": first_ms,
            "end_ms": last_ms,
            "intervals": intervals,
        }
    raise ValueError(f"unknown key {key!r}")


def _merge_records(kind: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum the counters of one sender id's records and union their bitmaps."""
    bitmap = "confirmed_bitmap" if kind == "snt" else "bitmap"
    out: dict[str, Any] = {}
    union = BitMap64()
    marks: dict[int, int] | None = {}
    # rcv: the seqs delivered more than once anywhere (again on one node, or on two nodes)
    multi: BitMap64 | None = BitMap64()
    for p in parts:
        for k, v in p.items():
            if k not in (bitmap, "marks", "again_bitmap"):
                out[k] = out.get(k, 0) + int(v)
        seqs = codecs.decode_bitmap(p[bitmap])
        if kind == "rcv":
            if p.get("again_bitmap") is None or multi is None:
                multi = None  # a record from before it was kept: per-fault figure unknown
            else:
                multi |= (union & seqs) | codecs.decode_bitmap(p["again_bitmap"])
        union |= seqs
        if kind == "snt":
            if p.get("marks") is None or marks is None:
                marks = None  # a record from before marks: per-fault figures unknown
            else:
                for second, seq in p["marks"]:
                    marks[int(second)] = min(int(seq), marks.get(int(second), int(seq)))
    out[bitmap] = codecs.encode_bitmap(union)
    out["records"] = len(parts)
    if kind == "snt":
        out["marks"] = None if marks is None else [[s, q] for s, q in sorted(marks.items())]
    else:
        out["multi_bitmap"] = None if multi is None else codecs.encode_bitmap(multi)
    return out


def run_locally(tasks: Iterable[Task]) -> dict[Key, Any]:
    """The job without Spark: the same functions in one process."""
    groups: dict[Key, list[Any]] = {}
    for t in tasks:
        for k, v in process_task(t):
            groups.setdefault(k, []).append(v)
    return dict(finalize(k, v) for k, v in groups.items())
