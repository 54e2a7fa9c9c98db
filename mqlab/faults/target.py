"""What a fault acts on (the protocol every fault kind shares).

A fault kind is one module of :mod:`mqlab.faults` with ``ACTIONS`` (the scenario's
``faults[].action`` values it carries out), ``check(fault, where)`` (before anything
starts; :class:`mqlab.errors.FleetError` when the target cannot take it) and
``apply(fault, target)``; what it leaves in place (a partition, a slowed link, a power
cut) the run heals later with the kind's ``heal`` (:mod:`mqlab.faults.schedule`). What
a fault cost (the unavailability it caused) is read back from the manifest's fault log
by :mod:`mqlab.analysis.faults`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mqlab.archive.faultlog import FaultEntry
from mqlab.brokers.base import Driver
from mqlab.brokers.cluster import LocalCluster
from mqlab.errors import FleetError
from mqlab.hosts.base import Host

# (when, action, node) of the second halves of faults: restart_node, resume_node,
# restart_all; heal with the key of what is in place in ``Target.cuts``
Pending = tuple[float, str, int]


@dataclass(frozen=True)
class Where:
    """Where a run's faults would strike, known before anything starts: hosts of their
    own (``remote``) or not, and the lab's kind (local, netns, ssh, aws)."""

    remote: bool
    lab_kind: str


@dataclass
class Target:
    """What applying a fault touches: the cluster and queue 0's driver (faults aimed at
    "the queue's leader" ask about queue 0's), the client hosts, where the run is
    (``remote``: hosts of their own; ``lab_kind``: local, netns, ssh, aws), the
    manifest's fault log, the second halves still to come (``pending``) and what is in
    place to heal (``cuts``, by the fault log entry that put it there)."""

    cluster: LocalCluster
    driver: Driver
    client_hosts: Callable[[], list[Host]]
    remote: bool
    lab_kind: str
    log: list[FaultEntry]
    phase: Callable[[str], None]
    pending: list[Pending] = field(default_factory=list)
    # a partitions.Cut, link.LinkFault or powerloss.PowerCut, healed by its kind's heal
    cuts: dict[int, Any] = field(default_factory=dict)


def now_ms() -> int:
    return int(time.time() * 1000)


def on_own_hosts(target: Target | Where, what: str) -> None:
    """A fault between hosts needs hosts with network stacks of their own (the scenario
    check refuses it earlier; this guards the run itself)."""
    if not target.remote:
        raise FleetError(
            f"{what} needs hosts of their own (every node is on this machine); "
            'run on a lab: cluster.target = "netns"'
        )
