"""Checks across a scenario's sections: what each value alone allows but the
combination cannot run. :func:`check` runs them, then the checks registered from the
layers above (:func:`register`: the AWS lab's checks, the published sets' names), so
that this package imports no cloud code and no reference data."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from mqlab.archive import faultlog as fl
from mqlab.brokers import registry
from mqlab.errors import ScenarioError
from mqlab.scenario.model import (
    TAKES,
    Clients,
    Cluster,
    Fault,
    Profile,
    Scenario,
    Workload,
    threads_in_all,
)

Check = Callable[[Scenario], None]
EXTRA: list[Check] = []


def register(extra: Check) -> Check:
    """Add a check that every loaded scenario passes through after the built-in ones; it
    raises ScenarioError for the first problem. Registered by the module that owns it
    (``mqlab.labs.aws.validate``, ...) when it is imported."""
    if extra not in EXTRA:
        EXTRA.append(extra)
    return extra


def check_sections(
    path: Path,
    cluster: Cluster,
    workload: Workload,
    clients: Clients,
    profile: Profile,
    faults: tuple[Fault, ...],
) -> None:
    """The built-in checks, on the sections before a Scenario is made of them."""
    _cross_checks(path, cluster, workload, profile, faults)
    _check_queues(path, workload, clients)


def check_registered(scenario: Scenario) -> None:
    """The checks registered from above, in the order they were registered."""
    for extra in EXTRA:
        extra(scenario)


def _cross_checks(
    path: Path, cluster: Cluster, workload: Workload, profile: Profile, faults: tuple[Fault, ...]
) -> None:
    w = workload
    if w.send_batch_min > w.send_batch_max:
        raise ScenarioError(
            path,
            "workload.send_batch_min",
            f"{w.send_batch_min} is greater than send_batch_max {w.send_batch_max}",
            "make send_batch_min <= send_batch_max",
        )
    if (w.messages_per_thread > 0) == (w.duration_s > 0):
        raise ScenarioError(
            path,
            "workload.messages_per_thread",
            "give exactly one of messages_per_thread and duration_s",
            "set one of them > 0 and leave the other out",
        )
    if w.mode == "fixed_rate" and w.rate_per_s <= 0:
        raise ScenarioError(
            path,
            "workload.rate_per_s",
            "fixed_rate needs rate_per_s > 0",
            "set rate_per_s (messages/s per sender thread)",
        )
    replicas = getattr(profile.settings, "replicas", None)
    if isinstance(replicas, int) and replicas > cluster.nodes:
        raise ScenarioError(
            path,
            "cluster.nodes",
            f"{cluster.nodes} nodes cannot hold {replicas} replicas (profile {profile.name})",
            f"use nodes >= {replicas} or a profile with fewer replicas",
        )
    for i, f in enumerate(faults):
        takes = TAKES[f.action]
        if takes.leader and profile.broker == "sqs":
            raise ScenarioError(
                path,
                f"faults[{i}].action",
                "sqs has no leader node to kill",
                f"use {fl.KILL_NODE}, or a broker with a leader",
            )
        if f.action == fl.PAUSE_NODE and f.duration_s is None:
            raise ScenarioError(
                path,
                f"faults[{i}].duration_s",
                f"{fl.PAUSE_NODE} needs how long the node stays frozen",
                "set duration_s = 5 (seconds)",
            )
        if takes.partition:
            _check_partition(path, i, f, cluster, profile)
        elif f.partition is not None:
            raise ScenarioError(
                path,
                f"faults[{i}].partition",
                f"{f.action} takes no partition",
                f'use action = "{fl.PARTITION}" to cut hosts apart',
            )
        _check_netem(path, i, f, cluster, profile)
        if takes.reboots and cluster.target not in ("ssh", "aws"):
            raise ScenarioError(
                path,
                f"faults[{i}].action",
                f"{f.action} reboots a host's kernel unsynced, and on target "
                f'"{cluster.target}" that kernel is this machine\'s',
                'run it on hosts of their own: target = "ssh" or "aws"',
            )
        if takes.reboots:
            _check_self_hosted(path, f"faults[{i}]", profile, "no host to cut the power of")
        if f.duration_s is not None and not takes.duration_s:
            raise ScenarioError(
                path,
                f"faults[{i}].duration_s",
                f"{f.action} takes no duration_s",
                f"use restart_after_s for {fl.KILL_NODE} and {fl.CRASH_ALL}",
            )
        if f.node >= cluster.nodes:
            raise ScenarioError(
                path,
                f"faults[{i}].node",
                f"node {f.node} does not exist",
                f"nodes are 0..{cluster.nodes - 1}",
            )
    _check_partitions_apart(path, faults)
    _check_netem_apart(path, faults)
    if cluster.target == "ssh" and not cluster.inventory:
        raise ScenarioError(
            path,
            "cluster.inventory",
            'target = "ssh" needs the hosts\' inventory file',
            'set inventory = "hosts.json" (format: docs/fleet.md)',
        )
    if cluster.target != "ssh" and cluster.inventory:
        raise ScenarioError(
            path,
            "cluster.inventory",
            f'an inventory file is only read for target = "ssh" (target is {cluster.target!r})',
            'remove inventory, or set target = "ssh"',
        )
    if cluster.target in ("local", "netns", "ssh") and (
        registry.BROKERS[profile.broker].local_cluster is None
    ):
        raise ScenarioError(
            path,
            "cluster.target",
            f"broker {profile.broker!r} has no local cluster",
            'use target = "aws"',
        )


def _check_queues(path: Path, workload: Workload, clients: Clients) -> None:
    """Every queue has a sender thread and a receiver thread (assigned round robin)."""
    n = workload.queues
    for role in ("receiver", "sender"):
        have = threads_in_all(clients, role)
        if have < n:
            raise ScenarioError(
                path,
                "workload.queues",
                f"{n} queues but {have} {role} thread(s) in all "
                f"({role}_nodes x {role}_threads): "
                f"{n - have} queue(s) would have no {role}",
                f"lower queues to {have}, or raise clients.{role}_threads "
                f"(or {role}_nodes) to {n} {role} threads in all",
            )


def _check_partition(path: Path, i: int, f: Fault, cluster: Cluster, profile: Profile) -> None:
    """A partition: lab hosts only, a kind, how long, brokers to cut apart."""
    key = f"faults[{i}]"
    _check_lab(path, key, cluster, "a partition cuts hosts apart")
    _check_self_hosted(path, key, profile, "nothing to cut apart")
    if f.partition is None:
        raise ScenarioError(
            path,
            f"{key}.partition",
            "a partition needs which hosts to cut apart",
            "set partition = one of " + ", ".join(f'"{k}"' for k in fl.PARTITION_KINDS),
        )
    _check_heals(path, key, f, "a partition", "it heals", "the partition heals")
    if f.partition != fl.CLIENTS_FROM_LEADER and cluster.nodes < 2:
        who = "the leader" if f.partition == fl.LEADER_FROM_BROKERS else f"node {f.node}"
        raise ScenarioError(
            path,
            f"{key}.partition",
            f"{f.partition} needs other brokers to cut {who} from (nodes = 1)",
            f'use nodes >= 2, or partition = "{fl.CLIENTS_FROM_LEADER}"',
        )


def _check_netem(path: Path, i: int, f: Fault, cluster: Cluster, profile: Profile) -> None:
    """netem: lab hosts only, something to do, how long; its settings on netem only."""
    key = f"faults[{i}]"
    given = [k for k in ("delay_ms", "jitter_ms", "loss_pct") if getattr(f, k) is not None]
    if not TAKES[f.action].netem:
        if given:
            raise ScenarioError(
                path,
                f"{key}.{given[0]}",
                f"{f.action} takes no {given[0]}",
                f'use action = "{fl.NETEM}" to slow down or drop packets on a link',
            )
        return
    _check_lab(path, key, cluster, f"{fl.NETEM} slows a host's own link")
    _check_self_hosted(path, key, profile, "no link to slow down")
    if not (f.delay_ms or f.loss_pct):
        raise ScenarioError(
            path,
            f"{key}.delay_ms",
            f"{fl.NETEM} needs a delay or a loss",
            "set delay_ms = 50 and/or loss_pct = 2",
        )
    if f.jitter_ms and not f.delay_ms:
        raise ScenarioError(
            path,
            f"{key}.jitter_ms",
            "jitter varies a delay: there is none",
            "set delay_ms as well",
        )
    _check_heals(path, key, f, fl.NETEM, "the link heals", "the link heals")


def _check_lab(path: Path, key: str, cluster: Cluster, what: str) -> None:
    """A fault between hosts: refused on a local cluster (one machine, one network stack)."""
    if cluster.target == "local":
        raise ScenarioError(
            path,
            f"{key}.action",
            f"{what}: every node of a local cluster is on this machine",
            'run on a lab: cluster.target = "netns"',
        )


def _check_self_hosted(path: Path, key: str, profile: Profile, nothing: str) -> None:
    """A fault on broker hosts: refused for a broker that runs on none (SQS)."""
    if not registry.BROKERS[profile.broker].self_hosted:
        raise ScenarioError(
            path,
            f"{key}.action",
            f"{profile.broker} runs on no host of the lab: {nothing}",
            "use a self-hosted broker",
        )


def _check_heals(path: Path, key: str, f: Fault, what: str, heals: str, fix: str) -> None:
    """A fault that heals by itself: it needs duration_s and takes no restart_after_s."""
    if f.duration_s is None:
        raise ScenarioError(
            path,
            f"{key}.duration_s",
            f"{what} needs how long it lasts before {heals}",
            "set duration_s = 5 (seconds)",
        )
    if f.restart_after_s is not None and not TAKES[f.action].restart_after_s:
        raise ScenarioError(
            path,
            f"{key}.restart_after_s",
            f"{f.action} takes no restart_after_s",
            f"use duration_s: {fix} after it",
        )


def _check_partitions_apart(path: Path, faults: tuple[Fault, ...]) -> None:
    """One partition at a time: two in place at once could need the same route."""
    cuts = sorted(
        (f.at_s, i, f.at_s + (f.duration_s or 0.0))
        for i, f in enumerate(faults)
        if f.action == fl.PARTITION
    )
    for (_at, i, healed), (at, j, _end) in itertools.pairwise(cuts):
        if at < healed:
            raise ScenarioError(
                path,
                f"faults[{j}].at_s",
                f"this partition starts at {at:g} s, before the one of faults[{i}] heals "
                f"({healed:g} s)",
                f"start it at {healed:g} s or later: one partition at a time",
            )


def _check_netem_apart(path: Path, faults: tuple[Fault, ...]) -> None:
    """One netem per node at a time: one link, one impairment."""
    spans = sorted(
        (f.node, f.at_s, i, f.at_s + (f.duration_s or 0.0))
        for i, f in enumerate(faults)
        if f.action == fl.NETEM
    )
    for (node, _at, i, healed), (node_b, at, j, _end) in itertools.pairwise(spans):
        if node == node_b and at < healed:
            raise ScenarioError(
                path,
                f"faults[{j}].at_s",
                f"this netem on node {node} starts at {at:g} s, before the one of faults[{i}] "
                f"heals ({healed:g} s)",
                f"start it at {healed:g} s or later: one netem per node at a time",
            )
