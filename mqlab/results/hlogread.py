"""Minimal reader of mqlab's own interval logs (the quick summary's input).

The Spark job and `mqlab summarize --logs` have the general, fault-tolerant
reader; this one reads the logs mqlab writes and fails loudly on anything else.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mqlab.errors import ArchiveError


@dataclass(frozen=True)
class Interval:
    start_ms: int
    end_ms: int
    payload: str


def read_intervals(path: Path) -> Iterator[Interval]:
    base_s = None
    start_s = None
    with path.open(encoding="ascii") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith('"'):
                continue
            if line.startswith("#[StartTime:"):
                start_s = float(line.split()[1])
                continue
            if line.startswith("#[BaseTime:"):
                base_s = float(line.split()[1])
                continue
            if line.startswith("#"):
                continue
            if line.startswith("Tag="):
                line = line.split(",", 1)[1]
            parts = line.split(",")
            if len(parts) != 4:
                raise ArchiveError(f"{path}:{lineno}: not an interval line")
            base = base_s if base_s is not None else (start_s or 0.0)
            t0 = (base + float(parts[0])) * 1000
            yield Interval(round(t0), round(t0 + float(parts[1]) * 1000), parts[3])
