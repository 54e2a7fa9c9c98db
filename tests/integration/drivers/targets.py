"""The brokers the driver contract suite runs against, each on its real local server.

To add a broker: one ``Target`` entry. ``settings`` must make redelivery quick
(a visibility timeout of about ``visibility_s``) so the suite stays short.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    broker: str
    settings: Callable[[], Any]  # the driver's Settings with short timeouts
    visibility_s: float  # after this, unacked deliveries must be visible again
    nodes: int | None = None  # None: the launcher's default (3)
    reports_redelivery: bool = True  # Delivery.redelivered is set by this broker


def _nats() -> Any:
    from mqlab.drivers.nats import Settings

    return Settings(ack_wait_s=2.0)


def _postgres() -> Any:
    from mqlab.drivers.postgres import Settings

    return Settings(visibility_timeout_s=2.0, poll_interval_s=0.05, commit_timeout_s=10.0)


def _redis() -> Any:
    from mqlab.drivers.redis import Settings

    return Settings(visibility_timeout_s=2.0, reclaim_interval_s=0.5, wait_replicas=1)


def _rabbitmq() -> Any:
    from mqlab.drivers.rabbitmq import Settings

    return Settings()


def _kafka() -> Any:
    from mqlab.drivers.kafka import Settings

    return Settings(
        replicas=1,
        min_insync_replicas=1,
        partitions=4,
        commit_interval_s=0.0,
        session_timeout_ms=6000,
    )


def _sqs() -> Any:
    from mqlab.drivers.sqs import Settings

    return Settings(visibility_timeout_s=2)


TARGETS: dict[str, Target] = {
    "nats": Target("nats", _nats, visibility_s=2.0),
    "redis": Target("redis", _redis, visibility_s=2.0),
    # no visibility timeout: RabbitMQ redelivers when the receiver's channel closes
    "rabbitmq": Target("rabbitmq", _rabbitmq, visibility_s=2.0),
    # tansu: one node (replicas lowered); uncommitted offsets return after a rebalance
    "kafka": Target("kafka", _kafka, visibility_s=2.0, nodes=1, reports_redelivery=False),
    "sqs": Target("sqs", _sqs, visibility_s=2.0, nodes=1),
    "postgres": Target("postgres", _postgres, visibility_s=2.0),
}
