"""Process faults: a broker node killed (``kill_node``, ``kill_leader``), paused
(``pause_node``), every node killed at once (``crash_all``), a node restarted
(``restart_node``); and their second halves (``restart_node``, ``resume_node``,
``restart_all``) at the time the fault says."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from mqlab.brokers.base import Driver
from mqlab.brokers.cluster import LocalCluster
from mqlab.errors import ClusterError, MqlabError
from mqlab.faults.target import Target, Where, now_ms

LOG = logging.getLogger(__name__)
LEADER_WAIT_S = 30.0  # a fault aimed at the leader waits this long for one (an election)
ACTIONS = ("kill_node", "kill_leader", "restart_node", "pause_node", "crash_all")


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
    if f.action == "kill_leader":
        node = leader(cluster, target.driver, "kill_leader")
    at_ms = now_ms()  # once the leader is known: when the fault strikes
    if f.action in ("kill_node", "kill_leader"):
        which = " (the leader)" if f.action == "kill_leader" else ""
        phase(f"fault: killing node {node}{which}")
        cluster.kill_node(node)
        if f.restart_after_s is not None:
            pending.append((f.at_s + f.restart_after_s, "restart_node", node))
    elif f.action == "pause_node":
        phase(f"fault: pausing node {f.node} for {f.duration_s:g} s")
        cluster.pause_node(f.node)
        pending.append((f.at_s + f.duration_s, "resume_node", f.node))
    elif f.action == "crash_all":
        phase("fault: killing every node at once")
        cluster.crash_all()
        after = f.restart_after_s or 0.0
        pending.append((f.at_s + after, "restart_all", cluster.nodes))
    else:
        cluster.restart_node(f.node)
    entry = {**dataclasses.asdict(f), "node": node, "at_ms": at_ms}
    if f.action == "crash_all":
        entry["nodes"] = cluster.nodes
    target.log.append(entry)


def end(action: str, node: int, target: Target) -> None:
    """The second half of a process fault: a killed node restarted, every node restarted
    together after a crash (``node`` is then how many), a paused node resumed."""
    cluster, phase = target.cluster, target.phase
    if action == "restart_all":  # after crash_all: every node together; ``node``: how many
        phase("fault: restarting every node")
        cluster.restart_nodes(list(range(node)))
        at_ms = now_ms()
        for i in range(node):
            target.log.append({"action": "restart_node", "node": i, "at_ms": at_ms})
        return
    if action == "resume_node":
        phase(f"fault: resuming node {node}")
        cluster.resume_node(node)
    else:
        phase(f"fault: restarting node {node}")
        cluster.restart_node(node)
    target.log.append({"action": action, "node": node, "at_ms": now_ms()})
