"""Process faults: a broker node killed (``kill_node``, ``kill_leader``), paused
(``pause_node``), every node killed at once (``crash_all``), a node restarted
(``restart_node``); and their second halves (``restart_node``, ``resume_node``,
``restart_all``) at the time the fault says."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from mqlab.archive import faultlog as fl
from mqlab.archive.faultlog import FaultEntry
from mqlab.brokers.base import Driver
from mqlab.brokers.cluster import LocalCluster
from mqlab.errors import ClusterError, MqlabError
from mqlab.faults.target import Target, Where, now_ms

LOG = logging.getLogger(__name__)
LEADER_WAIT_S = 30.0  # a fault aimed at the leader waits this long for one (an election)
ACTIONS = (fl.KILL_NODE, fl.KILL_LEADER, fl.RESTART_NODE, fl.PAUSE_NODE, fl.CRASH_ALL)
# the second half of crash_all: every node restarted together (a pending step, not logged)
RESTART_ALL = "restart_all"


def leader(cluster: LocalCluster, driver: Driver, what: str, wait_s: float = LEADER_WAIT_S) -> int:
    """The node leading the driver's queue now, for a fault aimed at it. A cluster between
    leaders (an election after an earlier fault) is asked again each second for up to
    ``wait_s``; the fault strikes once there is one."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return cluster.leader(driver)
        except MqlabError as e:
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"{what}: cannot tell the leader after {wait_s:g} s ({e})"
                ) from None
            LOG.info("%s: no leader yet (%s); asking again", what, e)
            time.sleep(1.0)


def check(f: Any, where: Where) -> None:
    """A process fault strikes wherever the broker's nodes run."""


def apply(f: Any, target: Target) -> None:
    cluster, phase, pending = target.cluster, target.phase, target.pending
    node = f.node
    if f.action == fl.KILL_LEADER:
        node = leader(cluster, target.driver, fl.KILL_LEADER)
    at_ms = now_ms()  # once the leader is known: when the fault strikes
    if f.action in (fl.KILL_NODE, fl.KILL_LEADER):
        which = " (the leader)" if f.action == fl.KILL_LEADER else ""
        phase(f"fault: killing node {node}{which}")
        cluster.kill_node(node)
        if f.restart_after_s is not None:
            pending.append((f.at_s + f.restart_after_s, fl.RESTART_NODE, node))
    elif f.action == fl.PAUSE_NODE:
        phase(f"fault: pausing node {f.node} for {f.duration_s:g} s")
        cluster.pause_node(f.node)
        pending.append((f.at_s + f.duration_s, fl.RESUME_NODE, f.node))
    elif f.action == fl.CRASH_ALL:
        phase("fault: killing every node at once")
        cluster.crash_all()
        after = f.restart_after_s or 0.0
        pending.append((f.at_s + after, RESTART_ALL, cluster.nodes))
    else:
        cluster.restart_node(f.node)
    entry = FaultEntry.applied(dataclasses.asdict(f), node, at_ms)
    if f.action == fl.CRASH_ALL:
        entry.nodes = cluster.nodes
    target.log.append(entry)


def end(action: str, node: int, target: Target) -> None:
    """The second half of a process fault: a killed node restarted, every node restarted
    together after a crash (``node`` is then how many), a paused node resumed."""
    cluster, phase = target.cluster, target.phase
    if action == RESTART_ALL:  # after crash_all: every node together; ``node``: how many
        phase("fault: restarting every node")
        cluster.restart_nodes(list(range(node)))
        at_ms = now_ms()
        for i in range(node):
            target.log.append(FaultEntry(fl.RESTART_NODE, i, at_ms))
        return
    if action == fl.RESUME_NODE:
        phase(f"fault: resuming node {node}")
        cluster.resume_node(node)
    else:
        phase(f"fault: restarting node {node}")
        cluster.restart_node(node)
    target.log.append(FaultEntry(action, node, now_ms()))
