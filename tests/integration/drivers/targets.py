"""The brokers the driver contract suite runs against, each on its real local server.

To add a broker: one ``Target`` entry. ``settings`` must make redelivery quick
(a visibility timeout of about ``visibility_s``) so the suite stays short; a broker
without a visibility timeout, which redelivers only what a closed channel or connection
held, has ``visibility_s=None``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    broker: str
    settings: Callable[[], Any]  # the driver's Settings with short timeouts
    # after this, unacked deliveries must be visible again; None: the broker has no such
    # timeout and redelivers only once the receiver's channel or connection closes
    visibility_s: float | None
    nodes: int | None = None  # None: the launcher's default (3)
    reports_redelivery: bool = True  # Delivery.redelivered is set by this broker
    remaining_exact: bool = True  # remaining().count is exact at once (not approximate)
    remaining_counts_unacked: bool = True  # remaining() counts deliveries of open receivers
    acks_remove_at_once: bool = True  # False: only once all earlier ones are acked (offsets)
    # a receiver holds deliveries fetched ahead of receive() (the driver's prefetch): the
    # broker counts them as delivered (in flight) as well as those handed out unacked
    prefetches: bool = False


def _nats() -> Any:
    from mqlab.brokers.nats.driver import Settings

    return Settings(ack_wait_s=2.0)


def _postgres() -> Any:
    from mqlab.brokers.postgres.driver import Settings

    return Settings(visibility_timeout_s=2.0, poll_interval_s=0.05, commit_timeout_s=10.0)


def _redis() -> Any:
    from mqlab.brokers.redis.driver import Settings

    return Settings(visibility_timeout_s=2.0, reclaim_interval_s=0.5, wait_replicas=1)


def _redis_keep() -> Any:
    from mqlab.brokers.redis.driver import Settings

    return Settings(
        streams=3, delete_on_ack=False, visibility_timeout_s=2.0, reclaim_interval_s=0.5
    )


def _rabbitmq() -> Any:
    from mqlab.brokers.rabbitmq.driver import Settings

    return Settings()


def _kafka() -> Any:
    from mqlab.brokers.kafka.driver import Settings

    return Settings(
        replicas=1,
        min_insync_replicas=1,
        partitions=4,
        commit_interval_s=0.0,
        session_timeout_ms=6000,
    )


def _mongodb() -> Any:
    from mqlab.brokers.mongodb.driver import Settings

    return Settings(visibility_timeout_s=2.0, poll_interval_s=0.05, op_timeout_s=10.0)


def _pulsar() -> Any:
    from mqlab.brokers.pulsar.driver import Settings

    return Settings(
        ensemble_size=1, write_quorum=1, ack_quorum=1, ack_timeout_s=10.0, operation_timeout_s=5
    )


def _artemis() -> Any:
    from mqlab.brokers.artemis.driver import Settings

    return Settings(receipt_timeout_s=10.0)


def _sqs() -> Any:
    from mqlab.brokers.sqs.driver import Settings

    return Settings(visibility_timeout_s=2)


TARGETS: dict[str, Target] = {
    "nats": Target("nats", _nats, visibility_s=2.0, prefetches=True),
    "redis": Target("redis", _redis, visibility_s=2.0, prefetches=True),
    # acked entries stay in the streams: remaining() must not count them
    "redis-keep": Target("redis", _redis_keep, visibility_s=2.0, prefetches=True),
    # no visibility timeout: RabbitMQ redelivers when the receiver's channel closes;
    # remaining() reports only ready messages (not those held by open channels)
    "rabbitmq": Target(
        "rabbitmq",
        _rabbitmq,
        visibility_s=None,
        remaining_counts_unacked=False,
        prefetches=True,
    ),
    # tansu: one node (replicas lowered); uncommitted offsets return after a rebalance.
    # Redeliveries are flagged from the delivered marks in the commit metadata, which
    # tansu drops: a new receiver cannot know (test_kafka.py checks what does work)
    "kafka": Target(
        "kafka",
        _kafka,
        visibility_s=2.0,
        nodes=1,
        reports_redelivery=False,
        acks_remove_at_once=False,
        prefetches=True,
    ),
    # SQS's message counts are approximate (moto's happen to be exact)
    "sqs": Target("sqs", _sqs, visibility_s=2.0, nodes=1, remaining_exact=False),
    "postgres": Target("postgres", _postgres, visibility_s=2.0),
    # mongoeco: one process, in memory (majority and journaled are accepted, not performed)
    "mongodb": Target("mongodb", _mongodb, visibility_s=2.0, nodes=1),
    # pulsar-lite: one process, one copy. The ack timeout is client-side, at least 10 s in
    # pulsar-client, counted from receive(); the receiver queue (prefetch) is in flight.
    # remaining(): messages stored minus distinct acks (live counters; in_flight unknown)
    "pulsar": Target("pulsar", _pulsar, visibility_s=10.0, nodes=1, prefetches=True),
    # ActiveMQ 5, the Artemis stand-in (3 brokers, shared-store master/slave): no visibility
    # timeout, a closed connection returns what it held; remaining() is the statistics
    # plugin's queue size (unacked included) and its in-flight count (prefetch included)
    "artemis": Target("artemis", _artemis, visibility_s=None, prefetches=True),
}
