"""Published mqperf 2021 rows (SoftwareMill, "Evaluating persistent, replicated message
queues", 2021 edition) and their mapping to mqlab broker names."""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass
from importlib import resources
from typing import Any

from mqlab.analysis import catalog
from mqlab.brokers import registry
from mqlab.errors import ArchiveError
from mqlab.published.base import (
    Block,
    ReferenceError,
    measurement_notes,
    threads_nodes_title,
)

LOG = logging.getLogger(__name__)

REFERENCES = {"mqperf-2021": "mqperf-2021.csv"}
SOURCE = (
    'SoftwareMill, "Evaluating persistent, replicated message queues", 2021 edition; '
    "latencies are p95 over a 1-minute window in ms; 60000 marks runs where receivers "
    "fell behind"
)
FELL_BEHIND_MS = 60000.0
# mqperf system name -> (mqlab broker, None when exact else why the mapping is approximate):
# each broker's descriptor names its mqperf system (``mqlab/brokers/<name>/__init__.py``)
SYSTEM_TO_BROKER: dict[str, tuple[str, str | None]] = registry.mqperf_systems()


@dataclass(frozen=True)
class ReferenceRow:
    system: str
    table: str
    broker: str
    approximate: str | None
    sender_threads: int
    receiver_threads: int
    sender_nodes: int
    receiver_nodes: int
    send_msgs_per_s: float
    receive_msgs_per_s: float
    processing_latency_p95_ms: float
    send_latency_p95_ms: float

    @property
    def fell_behind(self) -> bool:
        return self.processing_latency_p95_ms >= FELL_BEHIND_MS


def load_reference(name: str = "mqperf-2021") -> list[ReferenceRow]:
    if name not in REFERENCES:
        raise ReferenceError(f"--reference {name}: unknown (known: {', '.join(REFERENCES)})")
    text = resources.files("mqlab.published.data").joinpath(REFERENCES[name]).read_text()
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        broker, approx = SYSTEM_TO_BROKER.get(r["system"], (r["system"].lower(), "unmapped"))
        rows.append(
            ReferenceRow(
                r["system"],
                r["table"],
                broker,
                approx,
                int(r["sender_threads"]),
                int(r["receiver_threads"]),
                int(r["sender_nodes"]),
                int(r["receiver_nodes"]),
                float(r["send_msgs_per_s"]),
                float(r["receive_msgs_per_s"]),
                float(r["processing_latency_p95_ms"]),
                float(r["send_latency_p95_ms"]),
            )
        )
    return rows


def _per_node(run: dict[str, Any], role: str) -> int:
    """A run's threads per ``role`` node: its processes per node x threads per process
    (mqperf's client nodes ran one process, so its threads are per node)."""
    processes = run.get(f"{role}_processes")
    return (1 if processes is None else int(processes)) * int(run[f"{role}_threads"])


def matching_rows(run: dict[str, Any], rows: list[ReferenceRow]) -> list[ReferenceRow]:
    """Published rows with the run's broker, threads per node and nodes."""
    return [
        r
        for r in rows
        if r.broker == run["broker"]
        and r.sender_threads == _per_node(run, "sender")
        and r.receiver_threads == _per_node(run, "receiver")
        and r.sender_nodes == run["sender_nodes"]
        and r.receiver_nodes == run["receiver_nodes"]
    ]


def broker_rows(broker: str, rows: list[ReferenceRow]) -> list[ReferenceRow]:
    return [r for r in rows if r.broker == broker]


def _ms(us: float | int | None) -> float | None:
    return None if us is None else round(us / 1000, 1)


@dataclass(frozen=True)
class ReferenceMatch:
    run: dict[str, Any]
    rows: list[ReferenceRow]  # same broker, threads and nodes
    other_configs: list[str]  # this broker's published configurations, when no match
    note: str | None  # approximate mapping, or why nothing matched
    worst_window: dict[str, Any] | None = None  # the run's worst per-window p95 figures


def worst_window(run: dict[str, Any]) -> dict[str, Any] | None:
    """The highest per-window p95 of processing and send latency (mqperf's metric when
    the windows are 1 minute long)."""
    try:
        rows = catalog.read_run_table(run["run_dir"], "windows").to_pylist()
    except ArchiveError:
        return None
    if not rows:
        return None
    return {
        "window_s": run["window_s"],
        "processing_us_p95": max(r["processing_us_p95"] for r in rows),
        "send_call_us_p95": max(r["send_call_us_p95"] for r in rows),
    }


def against_reference(runs: list[dict[str, Any]], name: str) -> list[ReferenceMatch]:
    rows = load_reference(name)
    out = []
    for run in runs:
        match = matching_rows(run, rows)
        notes = sorted({r.approximate for r in match if r.approximate})
        notes += measurement_notes(run)
        others: list[str] = []
        note = "; ".join(notes) or None
        if not match:
            same_broker = broker_rows(run["broker"], rows)
            others = sorted(
                {
                    f"{r.sender_threads}/{r.receiver_threads} threads, "
                    f"{r.sender_nodes}s-{r.receiver_nodes}r"
                    for r in same_broker
                }
            )
            note = "; ".join(
                [
                    f"no published {name} row for broker {run['broker']} with these threads "
                    "and nodes"
                    if same_broker
                    else f"{name} has no rows for broker {run['broker']}",
                    *notes,
                ]
            )
        out.append(ReferenceMatch(run, match, others, note, worst_window(run)))
    return out


class Mqperf2021:
    """mqperf 2021: one row per published test, the experiment is the article's table
    ("main", or Pulsar's "1-partition" / "4-partitions"); a run matches the rows of its
    broker, threads per node and nodes (mqperf's threads x nodes table)."""

    name = "mqperf-2021"
    source = SOURCE
    headers = ("source", "send msgs/s", "recv msgs/s", "proc p95 ms", "send p95 ms")

    def experiments(self) -> set[str]:
        return {r.table for r in load_reference(self.name)}

    def blocks(self, runs: Any, experiment: str | None) -> list[Block]:
        """The run's measured period (and its worst window, mqperf's 1-minute p95), then
        the published rows of its broker, threads per node and nodes."""
        out = []
        for m in against_reference(list(runs), self.name):
            run = m.run
            cells: list[tuple[Any, ...]] = [
                (
                    "mqlab (measured period)",
                    run["send_msgs_per_s"],
                    run["receive_msgs_per_s"],
                    _ms(run["processing_us_p95"]),
                    _ms(run["send_call_us_p95"]),
                )
            ]
            if m.worst_window:
                ww = m.worst_window
                cells.append(
                    (
                        f"mqlab worst {ww['window_s']:g} s window",
                        "-",  # the window's p95 figures only
                        "-",
                        _ms(ww["processing_us_p95"]),
                        _ms(ww["send_call_us_p95"]),
                    )
                )
            for x in m.rows:
                if experiment is not None and x.table != experiment:
                    continue
                cells.append(
                    (
                        f"{self.name} {x.system}" + (f" ({x.table})" if x.table != "main" else ""),
                        x.send_msgs_per_s,
                        x.receive_msgs_per_s,
                        "fell behind" if x.fell_behind else x.processing_latency_p95_ms,
                        x.send_latency_p95_ms,
                    )
                )
            notes = [m.note] if m.note else []
            if m.other_configs:
                notes.append(
                    "published configurations for this broker: " + "; ".join(m.other_configs)
                )
            out.append(Block(threads_nodes_title(run), self.headers, cells, notes))
        return out


PUBLISHED = Mqperf2021()
