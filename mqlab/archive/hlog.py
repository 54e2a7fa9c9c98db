"""HdrHistogram interval logs: mqlab's writer (format 1.3) and a tolerant reader (1.2, 1.3).

The writer: timestamps are seconds relative to BaseTime (= StartTime, epoch seconds);
Interval_Max is in milliseconds (values are microseconds).

The reader reads logs written by mqlab and by other tools (Java HdrHistogram, jHiccup,
pulsar-perf): optional ``Tag=NAME,`` prefixes, ``#[StartTime: ...]`` and
``#[BaseTime: ...]`` headers, relative or absolute timestamps. A line that does
not parse, or whose histogram does not decode, becomes a :class:`Problem`
(file, line number, what is wrong); the line is skipped, never silently dropped.

Parsing (cheap) and decoding (expensive) are separate steps so that the Spark
job decodes inside its executors.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from hdrh.histogram import HdrHistogram

LOG = logging.getLogger(__name__)

LOG_FORMAT_VERSION = "1.3"
SUPPORTED_VERSIONS = ("1.2", "1.3")
_ONE_YEAR_S = 365 * 24 * 3600.0
_NUM = r"([0-9]+(?:\.[0-9]*)?)"
_START_RE = re.compile(r"#\[StartTime:\s*" + _NUM)
_BASE_RE = re.compile(r"#\[BaseTime:\s*" + _NUM)
_VERSION_RE = re.compile(r"#\[Histogram log format version\s*([0-9.]+)\]")
_MQLAB_RE = re.compile(r"#\[mqlab\s+([^\]]*)\]")


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None  # None: the whole file (missing, unreadable)
    problem: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.problem}"


@dataclass(frozen=True)
class Interval:
    """One interval line; ``start_ms``/``end_ms`` are absolute epoch milliseconds."""

    line: int
    tag: str | None
    start_ms: int
    end_ms: int
    payload: str


@dataclass
class LogHeader:
    version: str | None = None
    start_time_s: float | None = None
    base_time_s: float | None = None
    mqlab: dict[str, str] | None = None


def read_lines(path: str) -> tuple[list[str] | None, Problem | None]:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().splitlines(), None
    except FileNotFoundError:
        return None, Problem(path, None, "missing file")
    except OSError as err:
        return None, Problem(path, None, f"unreadable: {err}")


def parse_log(path: str, lines: list[str]) -> Iterator[Interval | Problem | LogHeader]:
    """Yield the header (once, first), then intervals and problems in line order."""
    header = LogHeader()
    pending: list[Interval | Problem] = []
    first_ts: float | None = None
    rows: list[tuple[int, str | None, float, float, str]] = []
    for no, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        if text.startswith("#"):
            _header_line(header, text)
            continue
        if text.startswith('"StartTimestamp"') or text.startswith("StartTimestamp"):
            continue
        parsed = _parse_interval(text)
        if isinstance(parsed, str):
            pending.append(Problem(path, no, parsed))
            continue
        tag, start, length, payload = parsed
        if first_ts is None:
            first_ts = start
        rows.append((no, tag, start, length, payload))
    if header.version is not None and header.version not in SUPPORTED_VERSIONS:
        LOG.warning("%s: log format version %s, reading it as 1.3", path, header.version)
    base = _base_time(header, first_ts)
    yield header
    for no, tag, start, length, payload in rows:
        s = base + start
        pending.append(Interval(no, tag, round(s * 1000), round((s + length) * 1000), payload))
    pending.sort(key=lambda x: x.line if x.line is not None else 0)
    yield from pending


def _header_line(header: LogHeader, text: str) -> None:
    if m := _VERSION_RE.match(text):
        header.version = m.group(1)
    elif m := _START_RE.match(text):
        header.start_time_s = float(m.group(1))
    elif m := _BASE_RE.match(text):
        header.base_time_s = float(m.group(1))
    elif m := _MQLAB_RE.match(text):
        header.mqlab = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)


def _base_time(header: LogHeader, first_ts: float | None) -> float:
    """Timestamps are relative to BaseTime; without one, relative to StartTime when they
    look relative (smaller than a year), else absolute (as Java's reader decides)."""
    if header.base_time_s is not None:
        return header.base_time_s
    if header.start_time_s is not None and first_ts is not None and first_ts < _ONE_YEAR_S:
        return header.start_time_s
    return 0.0


def _parse_interval(text: str) -> tuple[str | None, float, float, str] | str:
    parts = text.split(",")
    tag = None
    if parts[0].startswith("Tag="):
        tag = parts[0][4:]
        parts = parts[1:]
    if len(parts) != 4:
        return f"expected 4 comma-separated fields, found {len(parts)} (truncated or corrupt)"
    try:
        start, length, _max = float(parts[0]), float(parts[1]), float(parts[2])
    except ValueError:
        return "timestamp, length or max is not a number"
    if length < 0:
        return "negative interval length"
    payload = parts[3].strip()
    if not payload:
        return "empty histogram payload"
    return tag, start, length, payload


def decode(payload: str) -> HdrHistogram:
    """Decode one interval histogram; raises ValueError with a readable reason."""
    try:
        return HdrHistogram.decode(payload.encode("ascii"))
    except Exception as err:  # hdrh raises TypeError, zlib.error, its own exceptions
        raise ValueError(f"histogram does not decode: {type(err).__name__}: {err}") from err


def merge_into(acc: HdrHistogram | None, hist: HdrHistogram) -> HdrHistogram:
    """Add ``hist`` to ``acc`` (the first histogram becomes the accumulator)."""
    if acc is None:
        return hist
    acc.add(hist)
    return acc


class IntervalLogWriter:
    """Writes a standard HdrHistogram interval log (format 1.3), one line per interval.

    An interval with no values is still written (an empty histogram) so time has no gaps.
    """

    def __init__(self, out: TextIO, start_ms: int, comment: str | None = None):
        self.out = out
        self.base_ms = start_ms
        when = dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
        if comment:
            out.write(f"#[{comment}]\n")
        out.write(f"#[Histogram log format version {LOG_FORMAT_VERSION}]\n")
        out.write(f"#[StartTime: {start_ms / 1000:.3f} (seconds since epoch), {when[:-3]}Z]\n")
        out.write(f"#[BaseTime: {start_ms / 1000:.3f} (seconds since epoch)]\n")
        out.write(
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        )

    def write(self, hist: HdrHistogram, start_ms: int, end_ms: int) -> None:
        rel = (start_ms - self.base_ms) / 1000
        length = (end_ms - start_ms) / 1000
        max_ms = hist.get_max_value() / 1000 if hist.get_total_count() else 0.0
        payload = hist.encode().decode("ascii")
        self.out.write(f"{rel:.3f},{length:.3f},{max_ms:.3f},{payload}\n")
        self.out.flush()
