"""Published mqperf 2015 rows (SoftwareMill, "Evaluating persistent, replicated message
queues", 2015 edition, Adam Warski) laid out as the article does: one table per system and
setting, rows of nodes x threads with send and receive msgs/s (the article gives no
latencies)."""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from mqlab.published.base import Block, measurement_notes, threads_nodes_title

LOG = logging.getLogger(__name__)

NAME = "mqperf-2015"
SOURCE = (
    'SoftwareMill, "Evaluating persistent, replicated message queues", 2015 edition '
    "(Adam Warski, 4 May 2015); clients and servers m3.large (2 vCPU, 7.5 GB), one "
    "availability zone; nodes = sender nodes = receiver nodes, threads per node, batches of "
    "1..10; throughput only, no latencies published"
)
# article's system -> (mqlab broker or None, None when exact else why only approximate)
SYSTEM_TO_BROKER: dict[str, tuple[str | None, str | None]] = {
    "SQS": ("sqs", None),
    "MongoDB": ("mongodb", None),
    "RabbitMQ": (
        "rabbitmq",
        "approximate: RabbitMQ 3.5 mirrored classic queues (2015) vs quorum queues (mqlab)",
    ),
    "Kafka": (
        "kafka",
        "approximate: Kafka of 2015 with offsets in ZooKeeper vs a current Kafka with "
        "offsets in the broker",
    ),
    "HornetQ": (
        "artemis",
        "approximate: HornetQ 2.4 (2015: a 2-node live-backup pair, the core API) vs "
        "ActiveMQ Artemis, HornetQ's code base continued at Apache (mqlab: STOMP, one live "
        "server with 2 backups)",
    ),
    # ActiveMQ 5 with replicated LevelDB: no mqlab driver (the store was removed from
    # ActiveMQ 5; mqlab's ActiveMQ 5 is only the Artemis driver's local stand-in)
    "ActiveMQ": (None, "no mqlab broker: ActiveMQ 5 with replicated LevelDB"),
}


@dataclass(frozen=True)
class Row2015:
    system: str
    table: str
    nodes: int
    threads: int | None  # None: the article does not say
    send_msgs_per_s: float
    receive_msgs_per_s: float
    engine: str
    replication: str
    send_batch_max: int
    note: str

    @property
    def broker(self) -> str | None:
        return SYSTEM_TO_BROKER[self.system][0]

    @property
    def setting(self) -> str:
        """What tells rows of one table apart besides nodes and threads."""
        parts = [p for p in (self.engine, self.replication) if p]
        if self.send_batch_max != 10:
            parts.append(f"batch <= {self.send_batch_max}")
        return ", ".join(parts)


@cache
def load_rows() -> tuple[Row2015, ...]:
    text = resources.files("mqlab.published.data").joinpath(f"{NAME}.csv").read_text()
    return tuple(
        Row2015(
            r["system"],
            r["table"],
            int(r["nodes"]),
            int(r["threads"]) if r["threads"] else None,
            float(r["send_msgs_per_s"]),
            float(r["receive_msgs_per_s"]),
            r["engine"],
            r["replication"],
            int(r["send_batch_max"]),
            r["note"],
        )
        for r in csv.DictReader(io.StringIO(text))
    )


def _per_node(run: dict[str, Any], role: str) -> int:
    processes = run.get(f"{role}_processes")
    return (1 if processes is None else int(processes)) * int(run[f"{role}_threads"])


def matching_rows(run: dict[str, Any], experiment: str | None) -> list[Row2015]:
    """The article's rows of the run's broker with its threads per node and nodes (2015's
    nodes: as many sender nodes as receiver nodes; a run with unequal counts matches none)."""
    if run["sender_nodes"] != run["receiver_nodes"]:
        return []
    if _per_node(run, "sender") != _per_node(run, "receiver"):
        return []
    return [
        r
        for r in load_rows()
        if r.broker == run["broker"]
        and (experiment is None or r.table == experiment)
        and r.nodes == run["sender_nodes"]
        and r.threads == _per_node(run, "sender")
    ]


class Mqperf2015:
    """mqperf 2015: the experiment is one of the article's tables (e.g. "kafka-sync",
    "mongodb-async", "hornetq"); a run matches its broker's rows with its nodes and
    threads per node."""

    name = NAME
    source = SOURCE
    headers = ("source", "setting", "send msgs/s", "recv msgs/s")

    def experiments(self) -> set[str]:
        return {r.table for r in load_rows()}

    def blocks(self, runs: Any, experiment: str | None) -> list[Block]:
        out = []
        for run in runs:
            match = matching_rows(run, experiment)
            cells: list[tuple[Any, ...]] = [
                (
                    "mqlab (measured period)",
                    f"batch <= {run['batch']}" if run.get("batch") else "",
                    run["send_msgs_per_s"],
                    run["receive_msgs_per_s"],
                )
            ]
            for x in match:
                cells.append(
                    (
                        f"{self.name} {x.system} ({x.table})",
                        x.setting,
                        x.send_msgs_per_s,
                        x.receive_msgs_per_s,
                    )
                )
            notes = sorted({a for r in match if (a := SYSTEM_TO_BROKER[r.system][1])})
            notes += sorted({f"{r.table}: {r.note}" for r in match if r.note})
            if not match:
                notes.append(
                    f"no published {self.name} row"
                    + (f" in {experiment}" if experiment else "")
                    + f" for broker {run['broker']} with {run['sender_nodes']} sender and "
                    f"{run['receiver_nodes']} receiver nodes and these threads (the article "
                    "ran as many sender as receiver nodes)"
                )
            notes += measurement_notes(run)
            out.append(Block(threads_nodes_title(run), self.headers, cells, notes))
        return out


PUBLISHED = Mqperf2015()
