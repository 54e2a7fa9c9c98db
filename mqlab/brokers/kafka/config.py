"""The Kafka driver's settings (a profile's ``[settings]``) and the client configuration
made from them: the topic's own configuration and the senders' producer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mqlab.typed import spec


@dataclass(frozen=True)
class Settings:
    replicas: int = spec(3, min=1, max=15, help="topic replication factor")
    min_insync_replicas: int = spec(2, min=1, max=15)
    partitions: int = spec(64, min=1, max=10_000)
    acks: str = spec("all", choices=("all", "1", "0"))
    idempotence: bool = spec(True, help="enable.idempotence on the producer")
    linger_ms: float = spec(
        5.0,
        min=0,
        help="producer linger.ms; 5 is the default of librdkafka and of Kafka's own Java "
        "producer since 4.0 (KIP-1030); 0 sends each message as soon as it is produced",
    )
    compression: str = spec(
        "none",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        help="producer compression.type (brokers-bench compared none, gzip and snappy)",
    )
    flush_messages: int = spec(
        0, min=0, help="topic flush.messages (fsync every N messages); 0: Kafka's default"
    )
    commit_interval_s: float = spec(
        10.0, min=0, help="commit acked offsets this often; 0: every ack"
    )
    session_timeout_ms: int = spec(10_000, min=1000)
    fetch_wait_max_ms: int = spec(100, min=0)
    send_timeout_s: float = spec(30.0, min=0.1)
    assignment_timeout_s: float = spec(60.0, min=1, help="how long a new receiver waits to join")
    prefetch: int = spec(500, min=1, help="messages a receiver buffers ahead of the worker")


def topic_config(s: Settings) -> dict[str, str]:
    """The topic's own configuration: its in-sync minimum and, if set, its flush interval."""
    config = {"min.insync.replicas": str(s.min_insync_replicas)}
    if s.flush_messages:
        config["flush.messages"] = str(s.flush_messages)
    return config


def bootstrap(endpoints: Any) -> str:
    """The bootstrap list of every node's ``host:port``."""
    return ",".join(f"{n.host}:{n.port}" for n in endpoints.nodes)


def producer_config(s: Settings, endpoints: Any) -> dict[str, Any]:
    """The senders' producer: the profile's acks, idempotence, linger and compression;
    Nagle off, as the Java client's sockets (TCP_NODELAY)."""
    return {
        "bootstrap.servers": bootstrap(endpoints),
        "acks": s.acks,
        "enable.idempotence": s.idempotence,
        "linger.ms": s.linger_ms,
        "compression.type": s.compression,
        "message.timeout.ms": int(s.send_timeout_s * 1000),
        "socket.nagle.disable": True,
    }
