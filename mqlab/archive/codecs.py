"""The archive's encodings: the histogram shape, 64-bit sequence bitmaps, ``counts.csv``,
``cpu.csv``.

Histograms are ``HdrHistogram(1, 3_600_000_000, 3)``: microseconds from 1 us to
1 h, 3 significant digits. Bitmaps are pyroaring ``BitMap64`` in the portable
64-bit Roaring format, base64 in JSON (sequence numbers are u64 end to end).
"""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hdrh.histogram import HdrHistogram
from pyroaring import BitMap64

LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIGNIFICANT_DIGITS = 3


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def encode_bitmap(bm: BitMap64) -> str:
    bm.run_optimize()
    return base64.b64encode(bm.serialize()).decode("ascii")


def decode_bitmap(text: str | bytes) -> BitMap64:
    raw = base64.b64decode(text) if isinstance(text, str) else text
    return BitMap64.deserialize(raw)


# -- counts.csv ------------------------------------------------------------------
# One row per interval (the same boundaries as the .hlog files). Counters are
# messages in the interval; ``last_ms`` is the epoch ms of the interval's last counted
# event (a confirmed send for senders, a receive for receivers; 0: none); ``lag_ms``
# is how far the sender thread furthest behind its fixed-rate schedule was at the
# interval's end (0 in closed loop and for receivers).
COUNT_FIELDS = (
    "sent",
    "confirmed",
    "failed",
    "unsent",
    "received",
    "first_received",
    "acked",
    "redelivered",
    "foreign",
)
COUNT_COLUMNS = ("start_ms", "length_ms", "last_ms", *COUNT_FIELDS, "lag_ms")
COUNTED = {"sender": "confirmed", "receiver": "received"}  # what a role's throughput counts


@dataclass(frozen=True)
class CountsRow:
    start_ms: int
    length_ms: int
    last_ms: int
    counts: dict[str, int]
    lag_ms: int

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.length_ms


def counts_header() -> str:
    return ",".join(COUNT_COLUMNS) + "\n"


def counts_line(
    start_ms: int, length_ms: int, last_ms: int, counts: dict[str, int], lag_ms: int
) -> str:
    values = (start_ms, length_ms, last_ms, *(counts.get(k, 0) for k in COUNT_FIELDS), lag_ms)
    return ",".join(str(int(v)) for v in values) + "\n"


def parse_counts(text: str) -> tuple[list[CountsRow], list[tuple[int, str]]]:
    """Rows of a counts.csv, and problems as (line number, what is wrong); a bad line is
    skipped and reported, never silently dropped."""
    rows: list[CountsRow] = []
    problems: list[tuple[int, str]] = []
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != COUNT_COLUMNS:
        return [], [(1, f"header is not {','.join(COUNT_COLUMNS)}")]
    n = len(COUNT_COLUMNS)
    for row in reader:
        if not row:
            continue
        try:
            values = [int(x) for x in row]
            if len(values) != n:
                raise ValueError
        except ValueError:
            problems.append((reader.line_num, f"not {n} integer fields (truncated or corrupt)"))
            continue
        start, length, last = values[0], values[1], values[2]
        if length < 0:
            problems.append((reader.line_num, "negative interval length"))
            continue
        counts = dict(zip(COUNT_FIELDS, values[3:-1], strict=True))
        rows.append(CountsRow(start, length, last, counts, values[-1]))
    return rows, problems


def sum_counts(rows: Iterable[CountsRow], fields: Sequence[str] = COUNT_FIELDS) -> dict[str, int]:
    out = dict.fromkeys(fields, 0)
    for r in rows:
        for f in fields:
            out[f] += r.counts[f]
    return out


# -- cpu.csv ---------------------------------------------------------------------
# One row per interval: the CPU time (user and system, µs) that a worker process (the
# same boundaries as its counts.csv) or a local broker node's process group used in it.
CPU_COLUMNS = ("start_ms", "length_ms", "user_us", "system_us")


@dataclass(frozen=True)
class CpuRow:
    start_ms: int
    length_ms: int
    user_us: int
    system_us: int

    @property
    def cpu_us(self) -> int:
        return self.user_us + self.system_us


def cpu_header() -> str:
    return ",".join(CPU_COLUMNS) + "\n"


def cpu_line(start_ms: int, length_ms: int, user_us: int, system_us: int) -> str:
    return f"{int(start_ms)},{int(length_ms)},{int(user_us)},{int(system_us)}\n"


def parse_cpu(text: str) -> tuple[list[CpuRow], list[tuple[int, str]]]:
    """Rows of a cpu.csv, and problems as (line number, what is wrong), as
    :func:`parse_counts` does."""
    rows: list[CpuRow] = []
    problems: list[tuple[int, str]] = []
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != CPU_COLUMNS:
        return [], [(1, f"header is not {','.join(CPU_COLUMNS)}")]
    for row in reader:
        if not row:
            continue
        try:
            values = [int(x) for x in row]
            if len(values) != len(CPU_COLUMNS):
                raise ValueError
        except ValueError:
            problems.append((reader.line_num, "not 4 integer fields (truncated or corrupt)"))
            continue
        if min(values[1:]) < 0:
            problems.append((reader.line_num, "a negative length or CPU time"))
            continue
        rows.append(CpuRow(*values))
    return rows, problems
