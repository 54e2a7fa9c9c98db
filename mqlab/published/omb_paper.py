"""The 2023 journal paper that benchmarked Redis, ActiveMQ Artemis, RabbitMQ and Kafka with
the OpenMessaging Benchmark (Maharjan, Chy, Arju, Cerny, "Benchmarking Message Queues",
Telecom 2023, 4, 298-312): its two experiments as a published data set
(``mqlab/published/data/omb-paper-2023.csv``; what it holds and leaves out: the README there).

- ``throughput-size-sweep``: one producer, one consumer, as fast as they go, for each
  message size of 10 B .. 100 KB; one row per system x size.
- ``latency-fixed-rate``: one producer, one consumer, 32 KB messages at 32 .. 480 per second
  (1 .. 15 MB/s, MB = 1024 KB); end-to-end latency p50, p75, p95, p99; one row per system x
  rate.

A run meets a row by broker (the paper's system) and message size (sizes below mqlab's
24-byte header meet the smallest run, 24 B) or, for the latency rows, by the run's offered
rate in MB/s: ``rate_per_s`` x sender threads x processes x nodes x message bytes / 2^20."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from mqlab.archive import layout
from mqlab.envelope import HEADER_BYTES as MIN_MESSAGE_BYTES
from mqlab.errors import ArchiveError
from mqlab.published import base as published
from mqlab.published.base import Block, measurement_notes

NAME = "omb-paper-2023"
CSV = f"{NAME}.csv"
THROUGHPUT = "throughput-size-sweep"
LATENCY = "latency-fixed-rate"
EXPERIMENTS = (THROUGHPUT, LATENCY)
SOURCE = (
    'Maharjan, Chy, Arju, Cerny, "Benchmarking Message Queues", Telecom 2023, 4, 298-312 '
    "(doi:10.3390/telecom4020018): OpenMessaging Benchmark, one producer and one consumer, "
    "each system installed once, locally, with its defaults on a 2020 MacBook Air (Apple "
    "M1, 16 GB RAM, 512 GB SSD): no replication; Redis as Pub/Sub (no persistence); 5 min "
    "per point. The paper's tables of values are not in the seed text: its published cells "
    "here are its workloads, its stated rankings and the one gap it states in numbers"
)
# the paper's system -> mqlab's broker
SYSTEM_TO_BROKER = {
    "Redis": "redis",
    "ActiveMQ Artemis": "artemis",
    "RabbitMQ": "rabbitmq",
    "Apache Kafka": "kafka",
}
MIB = 1024 * 1024  # the paper's MB: 32 events/s x 32 KB = 1 MBps, so MB = 1024 KB = 2^20 B
NO_RUN = "(no run)"  # a published row no given run meets
REACHED = 0.95  # a latency run that received less than this of its rate did not reach it
RATE_TOLERANCE = 0.02  # a run's offered MB/s within 2 % of a published rate meets it
THROUGHPUT_HEADERS = (
    "size",
    "mqlab run",
    "mqlab send msgs/s",
    "mqlab recv msgs/s",
    "mqlab recv MB/s",
    "published events/s",
    "published MB/s",
    "published rank",
)
PERCENTILES = ("p50", "p75", "p95", "p99")
LATENCY_HEADERS = (
    "rate MB/s",
    "events/s",
    "mqlab run",
    "mqlab recv msgs/s",
    *(f"mqlab {p} ms" for p in PERCENTILES),
    *(f"published {p} ms" for p in PERCENTILES),
    "published rank",
    "published p50 gap to Redis ms",
)
LATENCY_NOTE = (
    "latency: the paper's end-to-end latency (producer to consumer) is mqlab's processing "
    "latency (processing_us: from each message's intended send time to its receipt, so "
    "coordinated-omission correct); the paper does not say from which send time OMB counted"
)
THROUGHPUT_NOTE = (
    "throughput: the paper's figure is the maximum events/s its run reached and MB/s = that "
    "x the message size; mqlab's is the mean over the measured period (MB = 10^6 B in "
    "mqlab's MB/s, 2^20 B in the paper's)"
)
EMPTY_NOTE = (
    "published cells 'unknown': the paper gives these values in tables below its charts, "
    "which the seed text does not hold; they are left empty rather than read off a chart"
)


@dataclass(frozen=True)
class OmbRow:
    experiment: str
    system: str
    broker: str
    message_size: str  # as the paper writes it: "10 B", "32 KB"
    message_bytes: int  # KB = 1024 B
    rate_mb_per_s: float | None  # latency rows: the target rate, MB = 2^20 B
    events_per_s: int | None  # latency rows: the producer's rate
    duration_s: int
    max_events_per_s: float | None
    max_mb_per_s: float | None
    latency_ms: dict[str, float | None]  # p50, p75, p95, p99
    rank: int | None  # the paper's stated place among the four (1 best), None if not stated
    p50_gap_to_redis_ms: float | None

    @property
    def mqlab_bytes(self) -> int:
        """The message size an mqlab run of this row uses (never below the header)."""
        return max(self.message_bytes, MIN_MESSAGE_BYTES)


def _num(text: str, kind: type[int] | type[float]) -> Any:
    return None if text.strip() == "" else kind(text)


def load_rows() -> list[OmbRow]:
    text = resources.files("mqlab.published.data").joinpath(CSV).read_text()
    return [
        OmbRow(
            r["experiment"],
            r["system"],
            SYSTEM_TO_BROKER[r["system"]],
            r["message_size"],
            int(r["message_bytes"]),
            _num(r["rate_mb_per_s"], float),
            _num(r["events_per_s"], int),
            int(r["duration_s"]),
            _num(r["max_events_per_s"], float),
            _num(r["max_mb_per_s"], float),
            {p: _num(r[f"latency_{p}_ms"], float) for p in PERCENTILES},
            _num(r["rank"], int),
            _num(r["p50_gap_to_redis_ms"], float),
        )
        for r in csv.DictReader(io.StringIO(text))
    ]


def _workload(run: dict[str, Any]) -> dict[str, Any]:
    """The run's archived ``[workload]`` (mode and rate are not in the runs table)."""
    try:
        return dict(layout.read_scenario(run["run_dir"]).get("workload") or {})
    except (KeyError, ArchiveError):
        return {}


def offered_mb_per_s(run: dict[str, Any]) -> float | None:
    """A fixed-rate run's offered load in the paper's MB/s (2^20 B); None if closed loop."""
    w = _workload(run)
    if w.get("mode") != "fixed_rate" or not w.get("rate_per_s"):
        return None
    processes = run.get("sender_processes") or 1
    per_s = float(w["rate_per_s"]) * run["sender_threads"] * processes * run["sender_nodes"]
    return per_s * run["message_bytes"] / MIB


def _meets_rate(offered: float | None, row: OmbRow) -> bool:
    if offered is None or row.rate_mb_per_s is None:
        return False
    return abs(offered - row.rate_mb_per_s) <= RATE_TOLERANCE * row.rate_mb_per_s


def _ms(us: float | int | None) -> float | None:
    return None if us is None else round(us / 1000, 1)


class OmbPaper2023:
    """The paper's two experiments; blocks per experiment and broker, in the paper's layout
    (sizes down the side for throughput, rates down the side for latency)."""

    name = NAME
    source = SOURCE

    def experiments(self) -> set[str]:
        return {r.experiment for r in load_rows()}

    def blocks(self, runs: Sequence[dict[str, Any]], experiment: str | None) -> list[Block]:
        rows = load_rows()
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for run in runs:
            for exp in self._experiments_of(run, experiment, rows):
                groups.setdefault((exp, run["broker"]), []).append(run)
        out = []
        for (exp, broker), group in groups.items():
            mine = [r for r in rows if r.experiment == exp and r.broker == broker]
            if exp == THROUGHPUT:
                out.append(self._throughput(broker, mine, group))
            else:
                out.append(self._latency(broker, mine, group))
        return out

    def _experiments_of(
        self, run: dict[str, Any], experiment: str | None, rows: list[OmbRow]
    ) -> list[str]:
        if experiment is not None:
            return [experiment]
        ref = published.of_run(run["run_dir"]) if run.get("run_dir") else None
        if ref is not None and ref[0] == self.name:
            return [ref[1]]
        return [e for e in EXPERIMENTS if any(r.broker == run["broker"] for r in rows)]

    def _notes(self, broker: str, mine: list[OmbRow], runs: list[dict[str, Any]]) -> list[str]:
        notes = []
        if not mine:
            notes.append(f"{self.name} has no rows for broker {broker}")
        notes.append(EMPTY_NOTE)
        notes.append(
            "set-up: the paper ran one node of each system with its defaults on an Apple M1 "
            "laptop (no replication; Redis as Pub/Sub, no persistence); mqlab runs a 3-node "
            "replicated cluster with the scenario's profile, brokers and clients sharing "
            "this machine's cores"
        )
        for run in runs:
            notes += [
                f"{run['run_id']}: {n}"
                for n in measurement_notes(run, "the paper does not say from which OMB's count")
            ]
        return notes

    def _throughput(self, broker: str, mine: list[OmbRow], runs: list[dict[str, Any]]) -> Block:
        cells: list[tuple[Any, ...]] = []
        met: set[str] = set()
        for row in mine:
            at = [r for r in runs if r["message_bytes"] == row.mqlab_bytes]
            published_cells = (row.max_events_per_s, row.max_mb_per_s, row.rank)
            if not at:
                cells.append((row.message_size, NO_RUN, None, None, None, *published_cells))
            for run in at:
                met.add(run["run_id"])
                size = row.message_size
                if row.mqlab_bytes != row.message_bytes:
                    size += f" (mqlab {row.mqlab_bytes} B)"
                cells.append(
                    (
                        size,
                        run["run_id"],
                        run["send_msgs_per_s"],
                        run["receive_msgs_per_s"],
                        run["receive_mb_per_s"],
                        *published_cells,
                    )
                )
        for run in runs:
            if run["run_id"] not in met:
                cells.append(
                    (
                        f"{run['message_bytes']} B (no published size)",
                        run["run_id"],
                        run["send_msgs_per_s"],
                        run["receive_msgs_per_s"],
                        run["receive_mb_per_s"],
                        None,
                        None,
                        None,
                    )
                )
        notes = [THROUGHPUT_NOTE]
        if any(r.message_bytes < MIN_MESSAGE_BYTES for r in mine):
            notes.append(
                f"size: mqlab's messages carry a {MIN_MESSAGE_BYTES}-byte header, so the "
                f"paper's 10 B point is run at {MIN_MESSAGE_BYTES} B"
            )
        if any(offered_mb_per_s(r) is not None for r in runs):
            notes.append("a fixed-rate run is not a maximum: its throughput is the rate it got")
        notes += self._notes(broker, mine, runs)
        system = mine[0].system if mine else broker
        return Block(f"{THROUGHPUT}: {system} ({broker})", THROUGHPUT_HEADERS, cells, notes)

    def _latency(self, broker: str, mine: list[OmbRow], runs: list[dict[str, Any]]) -> Block:
        cells: list[tuple[Any, ...]] = []
        met: set[str] = set()
        short: list[str] = []
        for row in mine:
            at = [
                r
                for r in runs
                if r["message_bytes"] == row.mqlab_bytes and _meets_rate(offered_mb_per_s(r), row)
            ]
            published_cells = (
                *(row.latency_ms[p] for p in PERCENTILES),
                row.rank,
                row.p50_gap_to_redis_ms,
            )
            lead = (row.rate_mb_per_s, row.events_per_s)
            if not at:
                cells.append((*lead, NO_RUN, None, *(None for _ in PERCENTILES), *published_cells))
            for run in at:
                met.add(run["run_id"])
                got = run["receive_msgs_per_s"]
                if row.events_per_s and got is not None and got < REACHED * row.events_per_s:
                    short.append(
                        f"{run['run_id']}: received {got:,.0f} msgs/s of the "
                        f"{row.events_per_s}/s offered: the rate was not reached here, so "
                        "its latency is mostly queueing"
                    )
                cells.append(
                    (
                        *lead,
                        run["run_id"],
                        run["receive_msgs_per_s"],
                        *(_ms(run[f"processing_us_{p}"]) for p in PERCENTILES),
                        *published_cells,
                    )
                )
        for run in runs:
            if run["run_id"] not in met:
                offered = offered_mb_per_s(run)
                cells.append(
                    (
                        None if offered is None else round(offered, 2),
                        None,
                        run["run_id"],
                        run["receive_msgs_per_s"],
                        *(_ms(run[f"processing_us_{p}"]) for p in PERCENTILES),
                        *(None for _ in PERCENTILES),
                        None,
                        None,
                    )
                )
        notes = [LATENCY_NOTE, *short]
        unmatched = [r["run_id"] for r in runs if r["run_id"] not in met]
        if unmatched:
            notes.append(
                "no published rate (32 KB messages at 1, 3, 6, 10 or 15 MB/s, fixed rate) "
                "for: " + ", ".join(unmatched)
            )
        notes.append(
            "published rank: the paper states Redis lowest and Kafka next at every rate; "
            "Artemis below RabbitMQ at low rates and above at high ones, without saying "
            "where they cross (so no rank for those two); its p50 gap Redis-Kafka is 3 ms "
            "in its results (about 4 ms in its conclusions)"
        )
        notes += self._notes(broker, mine, runs)
        system = mine[0].system if mine else broker
        return Block(f"{LATENCY}: {system} ({broker})", LATENCY_HEADERS, cells, notes)


PUBLISHED = OmbPaper2023()
