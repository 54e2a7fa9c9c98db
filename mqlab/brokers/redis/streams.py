"""The queue's streams as the Redis driver, its senders and its receivers share them: the
profile's settings, the stream keys, the entry's field, closing a client, and what
senders and receivers use of their driver (``RedisLink``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis
from redis.sentinel import SentinelConnectionPool

from mqlab.typed import spec

FIELD = b"m"


@dataclass(frozen=True)
class Settings:
    streams: int = spec(1, min=1, max=10_000, help="stream keys the queue is sharded over")
    wait_replicas: int = spec(
        0, min=0, max=10, help="WAIT for this many replicas after each send; 0: async"
    )
    wait_timeout_ms: int = spec(5000, min=1, help="WAIT timeout; fewer acks then fail the send")
    visibility_timeout_s: float = spec(
        30.0, min=0.1, help="idle time before XAUTOCLAIM takes an entry"
    )
    reclaim_interval_s: float = spec(5.0, min=0.05, help="how often a receiver runs XAUTOCLAIM")
    delete_on_ack: bool = spec(True, help="XDEL acked entries so streams do not grow")
    prefetch: int = spec(
        256,
        min=0,
        max=65_536,
        help="entries per receiver read ahead of receive() into a local buffer (at least the "
        "receive batch); acks are then written without waiting for their replies; "
        "0: each receive() reads at most its batch and each ack() waits, as before prefetch",
    )
    socket_timeout_s: float = spec(30.0, min=1.0)


def read_plan(keys: Sequence[bytes], start: int, max_messages: int) -> tuple[list[bytes], int]:
    """Keys to read from and a per-key COUNT so that at most ``max_messages`` come back."""
    k = min(len(keys), max_messages)
    chosen = [keys[(start + i) % len(keys)] for i in range(k)]
    return chosen, max_messages // k


def close_client(r: redis.Redis) -> None:
    """Close ``r`` and, for a client of the primary the sentinels name, its sentinel clients."""
    pool = r.connection_pool
    try:
        r.close()
    finally:
        if isinstance(pool, SentinelConnectionPool):
            pool.sentinel_manager.close()


def key_names(queue: str, streams: int) -> list[bytes]:
    if streams == 1:
        return [queue.encode()]
    return [f"{queue}:{i}".encode() for i in range(streams)]


class RedisLink(Protocol):
    """What senders and receivers use of their driver (``RedisDriver``)."""

    settings: Any
    keys: list[bytes]
    group: str
    sentinels: list[tuple[str, int]]

    def connect(self, timeout_s: float | None = None) -> redis.Redis: ...

    def release_name(self, name: str) -> None: ...
