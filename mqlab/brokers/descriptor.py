"""What a broker folder declares about itself: one :class:`Broker` in its ``__init__.py``.

Every ``mqlab/brokers/<name>/`` folder sets ``BROKER = Broker(...)``; :func:`scan` finds
them by listing the folders, so no list of brokers is kept anywhere else (the registry,
the node configurations, the images' attach path, the published sets and the contract
suite all read the descriptors).

STDLIB ONLY, and no import of the rest of mqlab: the images' boot script imports the
node configurations (``mqlab.brokers.nodeconf`` -> ``mqlab.brokers.<name>``, and so this
module) with a bare Python.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Attach:
    """What a broker's image serves, as the attach path (``mqlab.brokers.image``) checks it
    and hands it to clients: for brokers whose launcher cannot start nodes on hosts."""

    client: str  # the port name (``Broker.ports``) clients connect to
    # every node serves clients ("all"), or one at a time ("any": Artemis' backups open
    # their acceptor only when they take over from the live server)
    serving: str = "all"
    # ports every node's host listens on while the node runs (defaults to ``client``)
    running: tuple[str, ...] = ()
    # (port name, path): the broker's own readiness, an HTTP GET answered 2xx
    ready: tuple[str, str] | None = None
    # clients are sent on to the addresses the brokers advertise (their private ones):
    # a tunnel to the seed node is not enough, the coordinator must reach the lab itself
    follows_advertised: bool = False
    # extras every client needs (``Endpoints.extra``), from the image's broker.json
    extra: tuple[str, ...] = ()
    # per node, further ports by name (``NodeEndpoint.extra``: RocketMQ's admin ports)
    node_ports: tuple[str, ...] = ()


@dataclass(frozen=True)
class Contract:
    """One target of the driver contract suite (``tests/brokers/test_contract.py``): the
    driver on its real local server. ``settings`` (the driver's ``Settings`` keywords) must
    make redelivery quick (a visibility timeout of about ``visibility_s``) so the suite
    stays short."""

    name: str  # the target's id in the suite: the broker's name, or a variant of it
    settings: Mapping[str, Any] = field(default_factory=dict)
    # after this, unacked deliveries must be visible again; None: the broker has no such
    # timeout and redelivers only once the receiver's channel or connection closes
    visibility_s: float | None = 2.0
    nodes: int | None = None  # None: the launcher's default (3)
    reports_redelivery: bool = True  # Delivery.redelivered is set by this broker
    remaining_exact: bool = True  # remaining().count is exact at once (not approximate)
    remaining_counts_unacked: bool = True  # remaining() counts deliveries of open receivers
    acks_remove_at_once: bool = True  # False: only once all earlier ones are acked (offsets)
    # a receiver holds deliveries fetched ahead of receive() (the driver's prefetch): the
    # broker counts them as delivered (in flight) as well as those handed out unacked
    prefetches: bool = False


@dataclass(frozen=True)
class Broker:
    """One broker, as its folder declares it."""

    name: str  # the id used in scenarios and profiles (the folder's name)
    title: str  # human-readable
    # runs on our own nodes (gets a NixOS image, a node configuration and standard ports);
    # False for SaaS (SQS)
    self_hosted: bool
    # what runs locally and what it stands in for; with no local cluster, the reason why
    local_note: str
    # the folder whose ``driver.py`` drives it (its own, or another's: Redpanda speaks
    # Kafka); None while no driver exists
    driver_module: str | None
    # the folder whose ``cluster.py`` launches it locally; None: no local server (see
    # ``local_note``)
    local_cluster: str | None
    # the standard ports (port name -> number) on a host of its own; self-hosted only
    ports: Mapping[str, int] = field(default_factory=dict)
    # the attach path's entry, where the launcher cannot start nodes on hosts
    attach: Attach | None = None
    # the system's name in the published mqperf 2021 set, and why the mapping is
    # approximate (None when exact)
    mqperf: str | None = None
    mqperf_note: str | None = None
    # the driver contract suite's targets (none without a local server)
    contract: tuple[Contract, ...] = ()


def folders() -> list[str]:
    """The broker folders of ``mqlab/brokers/`` (those with an ``__init__.py``), sorted."""
    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(
        name
        for name in os.listdir(here)
        if not name.startswith(("_", "."))
        and os.path.isfile(os.path.join(here, name, "__init__.py"))
    )


def scan() -> dict[str, Broker]:
    """Every broker folder's descriptor, by name."""
    out: dict[str, Broker] = {}
    for name in folders():
        broker: Broker = importlib.import_module(f"mqlab.brokers.{name}").BROKER
        if broker.name != name:
            raise ValueError(f"mqlab/brokers/{name}/ declares broker {broker.name!r}")
        out[name] = broker
    return out
