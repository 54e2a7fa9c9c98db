"""Tyler Treat's published latency tails (his post on commit logs, NATS Streaming 0.3.1 vs
Kafka: a fixed 50 messages/s for 30 s, 256 B to 1 MB, coordinated-omission corrected, one
server each on m4.xlarge) laid out as the post does: per configuration, a row per message
size with the 99th to 99.9999th percentile in ms. His other latency post ("Benchmarking
Message Queue Latency") publishes plots only, so it has no rows here."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from mqlab.published.base import Block, measurement_notes

NAME = "treat-commit-logs"
SOURCE = (
    "Tyler Treat, his post benchmarking commit logs (NATS Streaming 0.3.1 vs Kafka, one "
    "server each, m4.xlarge, untuned): messages at a fixed 50/s for 30 s, latency "
    "percentiles in ms, corrected for coordinated omission"
)
SYSTEM_TO_BROKER = {
    "NATS Streaming": (
        "nats",
        "approximate: NATS Streaming 0.3.1 (one server) vs NATS JetStream (mqlab)",
    ),
    "Kafka": ("kafka", "approximate: Kafka of 2016, replication factor 1, off-the-shelf"),
}
ONE_MB = 1_048_576
LAG_NOTE = "this run's senders fell"  # measurement_notes' lag note speaks of mqperf


@dataclass(frozen=True)
class LatencyRow:
    system: str
    experiment: str
    message_bytes: int
    percentiles_ms: tuple[float, float, float, float, float]  # 99, 99.9, .., 99.9999

    @property
    def broker(self) -> str:
        return SYSTEM_TO_BROKER[self.system][0]


@cache
def load_rows() -> tuple[LatencyRow, ...]:
    text = resources.files("mqlab.published.data").joinpath(f"{NAME}.csv").read_text()
    return tuple(
        LatencyRow(
            r["system"],
            r["experiment"],
            int(r["message_bytes"]),
            (
                float(r["p99_ms"]),
                float(r["p99_9_ms"]),
                float(r["p99_99_ms"]),
                float(r["p99_999_ms"]),
                float(r["p99_9999_ms"]),
            ),
        )
        for r in csv.DictReader(io.StringIO(text))
    )


def _same_size(row: LatencyRow, message_bytes: int) -> bool:
    """The post's sizes: 256 B, 1 KB, 5 KB and 1 MB; a run of 1,000,000 bytes or more
    (NATS refuses a payload above 1 MiB with its headers) stands for the 1 MB row."""
    if row.message_bytes == ONE_MB:
        return message_bytes >= 1_000_000
    return row.message_bytes == message_bytes


def matching_rows(run: dict[str, Any], experiment: str | None) -> list[LatencyRow]:
    return [
        r
        for r in load_rows()
        if r.broker == run["broker"]
        and (experiment is None or r.experiment == experiment)
        and _same_size(r, int(run["message_bytes"]))
    ]


def _ms(us: float | int | None) -> float | None:
    return None if us is None else round(us / 1000, 4)


class TreatCommitLogs:
    """The experiment is one of the post's tables (nats-streaming-memory,
    nats-streaming-file, nats-streaming-file-nosync, kafka-rf1); a run matches its
    broker's rows of the same message size."""

    name = NAME
    source = SOURCE
    headers = ("source", "bytes", "p99 ms", "p99.9 ms", "p99.99 ms", "p99.999 ms", "p99.9999 ms")

    def experiments(self) -> set[str]:
        return {r.experiment for r in load_rows()}

    def blocks(self, runs: Any, experiment: str | None) -> list[Block]:
        out = []
        for run in runs:
            match = matching_rows(run, experiment)
            cells: list[tuple[Any, ...]] = [
                (
                    "mqlab processing latency (measured period)",
                    run["message_bytes"],
                    _ms(run["processing_us_p99"]),
                    _ms(run["processing_us_p99_9"]),
                    _ms(run["processing_us_p99_99"]),
                    None,  # mqlab's summary has no p99.999
                    _ms(run["processing_us_p99_9999"]),
                )
            ]
            cells += [
                (f"{self.name} {x.system} ({x.experiment})", x.message_bytes, *x.percentiles_ms)
                for x in match
            ]
            notes = sorted({SYSTEM_TO_BROKER[r.system][1] for r in match})
            if not match:
                notes.append(
                    f"no published {self.name} row"
                    + (f" in {experiment}" if experiment else "")
                    + f" for broker {run['broker']} with {run['message_bytes']} byte messages"
                )
            notes.append(
                "mqlab's processing latency runs from each message's intended send time to "
                "its receipt through the broker (the post's: publish to receipt); mqlab "
                "lists no p99.999 (see latency_distribution.txt for every step)"
            )
            notes += [n for n in measurement_notes(run) if not n.startswith(LAG_NOTE)]
            if run.get("sender_lag_ms_max"):
                notes.append(
                    f"this run's senders fell up to {run['sender_lag_ms_max']:,} ms behind "
                    "their fixed-rate schedule; its latencies count from each message's "
                    "intended send time, as the post's corrected ones do"
                )
            out.append(
                Block(
                    f"{run['run_id']} ({run['broker']}, {run['message_bytes']} B)",
                    self.headers,
                    cells,
                    notes,
                )
            )
        return out


PUBLISHED = TreatCommitLogs()
