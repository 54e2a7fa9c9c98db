"""Published brokers-bench rows (the "Message queue benchmark" report: a strictly ordered
stream, no batching, 3-node synchronous replication; Kafka, Redpanda, NATS JetStream,
Pulsar; then ten-topic, compression, multiple-producer and vertical-scaling runs), laid out
as the report prints them: per experiment, a row per source with msgs/s, MiB/s, p90, p99,
p99.9 and max latency. ``mqlab/published/data/README.md`` says what each column is."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from mqlab.published import base as published
from mqlab.published.base import Block, measurement_notes

LOG = logging.getLogger(__name__)

NAME = "brokers-bench"
CSV = "brokers-bench.csv"
SOURCE = (
    'brokers-bench report ("Message queue benchmark"): a strictly ordered stream, no '
    "batching, 3-node synchronous replication; Kafka, Redpanda and NATS JetStream on an "
    "MBP M2 32 GB, Pulsar on EC2 i3.large; later sections on a Docker VM of 2 (then 10) "
    "cores; latency is producer-to-consumer in ms, data throughput in MiB/s (the report's "
    '"Mb/sec")'
)
SYSTEM_TO_BROKER = {
    "Kafka": "kafka",
    "Redpanda": "redpanda",
    "NATS JetStream": "nats",
    "Pulsar": "pulsar",
}
HEADERS = ("source", "msgs/s", "MiB/s", "p90 ms", "p99 ms", "p99.9 ms", "max ms")
MIB = 2**20
NOT_PUBLISHED = "-"  # a figure the report's block does not print
LATENCY_NOTE = (
    "brokers-bench measured producer-to-consumer latency; mqlab's row shows its processing "
    "latency (intended send time to receipt, over the measured period) and its msgs/s is "
    "receive msgs/s; MiB/s = receive msgs/s x message bytes / 2^20"
)


@dataclass(frozen=True)
class Row:
    """One published result block of the report."""

    experiment: str
    system: str
    broker: str
    acks: str
    compression: str
    client_driver: str
    topics: int
    partitions_per_topic: int
    producers: int
    consumers: int
    message_bytes: int  # derived: data throughput / message throughput (MiB-based)
    msgs_per_s: float | None
    mib_per_s: float
    min_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    max_ms: float | None
    hardware: str
    duration_s: float | None
    messages_per_producer: int | None

    @property
    def label(self) -> str:
        """The source cell: the set, the system and what sets the row apart."""
        extra = [x for x in (self.compression if self.compression != "none" else "",) if x]
        if self.client_driver and self.client_driver != "nats":
            extra.append(self.client_driver)
        return f"{NAME} {self.system}" + (f" ({', '.join(extra)})" if extra else "")


def _num(text: str) -> float | None:
    return float(text) if text.strip() else None


def load() -> list[Row]:
    text = resources.files("mqlab.published.data").joinpath(CSV).read_text()
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        out.append(
            Row(
                experiment=r["experiment"],
                system=r["system"],
                broker=SYSTEM_TO_BROKER.get(r["system"], r["system"].lower()),
                acks=r["acks"],
                compression=r["compression"],
                client_driver=r["client_driver"],
                topics=int(r["topics"]),
                partitions_per_topic=int(r["partitions_per_topic"]),
                producers=int(r["producers"]),
                consumers=int(r["consumers"]),
                message_bytes=int(r["message_bytes"]),
                msgs_per_s=_num(r["msgs_per_s"]),
                mib_per_s=float(r["mib_per_s"]),
                min_ms=_num(r["min_ms"]),
                p90_ms=_num(r["p90_ms"]),
                p99_ms=_num(r["p99_ms"]),
                p999_ms=_num(r["p999_ms"]),
                max_ms=_num(r["max_ms"]),
                hardware=r["hardware"],
                duration_s=_num(r["duration_s"]),
                messages_per_producer=int(r["messages_per_producer"])
                if r["messages_per_producer"]
                else None,
            )
        )
    return out


def fig(x: float | None) -> str | None:
    """A figure as the report prints it: up to 3 decimals (0.072575 MiB/s shows 0.073,
    1.019 ms 1.019), none from 1000 on; None stays unknown."""
    if x is None:
        return None
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:,.3f}".rstrip("0").rstrip(".") or "0"


def _ms(us: float | int | None) -> float | None:
    return None if us is None else us / 1000


def run_cells(run: dict[str, Any]) -> tuple[Any, ...]:
    """The run's row: receive msgs/s, MiB/s and processing latency percentiles in ms."""
    mb = run.get("receive_mb_per_s")
    return (
        "mqlab (measured period)",
        run["receive_msgs_per_s"],
        fig(None if mb is None else mb * 1e6 / MIB),
        *(fig(_ms(run.get(f"processing_us_{p}"))) for p in ("p90", "p99", "p99_9", "max")),
    )


def published_cells(row: Row) -> tuple[Any, ...]:
    """A published row; a figure its block does not print shows as NOT_PUBLISHED."""
    return (
        row.label,
        NOT_PUBLISHED if row.msgs_per_s is None else row.msgs_per_s,
        fig(row.mib_per_s),
        *(
            NOT_PUBLISHED if x is None else fig(x)
            for x in (row.p90_ms, row.p99_ms, row.p999_ms, row.max_ms)
        ),
    )


def _shape(run: dict[str, Any]) -> str:
    """The run's set-up in the report's terms: topics, producers, consumers, bytes."""
    senders = int(run.get("sender_threads") or 0) * int(run.get("sender_processes") or 1)
    receivers = int(run.get("receiver_threads") or 0) * int(run.get("receiver_processes") or 1)
    senders *= int(run.get("sender_nodes") or 1)
    receivers *= int(run.get("receiver_nodes") or 1)
    return (
        f"{run.get('queues') or 1} queue(s), {senders} sender thread(s), {receivers} "
        f"receiver thread(s), {run.get('message_bytes')} B, send batch up to {run.get('batch')}"
    )


def setup_notes(run: dict[str, Any], rows: Sequence[Row]) -> list[str]:
    """How the published set-up differs from the run's: hardware, acks, drivers, size."""
    notes = [LATENCY_NOTE]
    for hw in sorted({r.hardware for r in rows}):
        notes.append(
            f"published hardware: {hw} (brokers and clients on one host); this run: "
            f"{run.get('host_cpu_model') or 'unknown CPU'}, target {run.get('cluster_target')}"
        )
    for acks in sorted({r.acks for r in rows}):
        notes.append(
            f"published producers waited for: {acks}; this run's settings are its profile's "
            f"({run.get('profile')})"
        )
    if rows:
        r = rows[0]
        notes.append(
            f"published: {r.topics} topic(s) x {r.partitions_per_topic} partition(s), "
            f"{r.producers} producer(s), {r.consumers} consumer(s), {r.message_bytes} B "
            f"(derived from MiB/s / msgs/s); this run: {_shape(run)}"
        )
    return notes


class BrokersBench:
    """brokers-bench: the experiments are the report's sections (README of
    mqlab/published/data); a run meets the rows of its experiment and its broker."""

    name = NAME
    source = SOURCE
    headers = HEADERS

    def experiments(self) -> set[str]:
        return {r.experiment for r in load()}

    def _experiments_of(self, run: dict[str, Any], rows: list[Row]) -> list[str]:
        ref = published.of_run(run["run_dir"]) if run.get("run_dir") else None
        if ref is not None and ref[0] == NAME:
            return [ref[1]]
        return list(dict.fromkeys(r.experiment for r in rows if r.broker == run["broker"]))

    def blocks(self, runs: Sequence[dict[str, Any]], experiment: str | None) -> list[Block]:
        rows = load()
        out = []
        for run in runs:
            wanted = [experiment] if experiment is not None else self._experiments_of(run, rows)
            if not wanted:
                out.append(
                    Block(
                        f"{run['run_id']} ({run['broker']})",
                        HEADERS,
                        [run_cells(run)],
                        [f"{NAME} has no rows for broker {run['broker']}", *measurement_notes(run)],
                    )
                )
                continue
            for exp in wanted:
                match = [r for r in rows if r.experiment == exp and r.broker == run["broker"]]
                cells = [run_cells(run), *(published_cells(r) for r in match)]
                notes = setup_notes(run, match)
                if not match:
                    systems = sorted({r.system for r in rows if r.experiment == exp})
                    notes.append(
                        f"{NAME} {exp} has no row for broker {run['broker']} (published: "
                        f"{', '.join(systems)})"
                    )
                notes += measurement_notes(run)
                out.append(
                    Block(f"{run['run_id']} ({run['broker']}) vs {exp}", HEADERS, cells, notes)
                )
        return out


PUBLISHED = BrokersBench()
