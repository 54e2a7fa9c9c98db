"""Broker clusters for a sequence of runs: one per broker and placement for a whole
sweep, or the one ``mqlab cluster up`` left running."""

from __future__ import annotations

import contextlib
import time

from mqlab.brokers import local, registry
from mqlab.brokers.cluster import LocalCluster
from mqlab.errors import MqlabError
from mqlab.labs.placement import Placement, lab_name
from mqlab.run.context import Observer
from mqlab.scenario.model import Scenario


class ClusterPool:
    """Local clusters for a sequence of runs: reuse a running one, else start and later stop."""

    def __init__(self, observer: Observer):
        self.observer = observer
        self.clusters: dict[str, tuple[LocalCluster, bool]] = {}  # key -> (cluster, owned)

    def get(self, s: Scenario, placement: Placement) -> tuple[LocalCluster, bool]:
        info = registry.BROKERS[s.broker]
        kind = s.broker if placement.brokers_from_image else info.local_cluster
        key = f"{kind}:{s.cluster.nodes}:{placement.kind}:{placement.name}"
        if key in self.clusters:
            cluster, owned = self.clusters[key]
            if all(cluster.alive()):
                return cluster, not owned
            cluster.stop()  # a node died in an earlier run and was not restarted: start afresh
            del self.clusters[key]
        running = local.find_running(s.broker) if not placement.remote else None
        if running is not None and running.nodes == s.cluster.nodes:
            self.observer.phase(f"using the local {s.broker} cluster that is already up")
            self.clusters[key] = (running, False)
            return running, True
        workdir = local.state_dir() / "runs" / f"cluster-{kind or s.broker}-{time.time_ns()}"
        # a lab whose images run the brokers (AWS): the class that attaches to them
        cls = (
            local.attach_class(s.broker)
            if placement.brokers_from_image
            else local.cluster_class(s.broker)
        )
        cluster = cls(workdir, s.cluster.nodes, placement.brokers if placement.remote else None)
        cluster.trusted_addresses = placement.client_addresses()
        cluster.reach = placement.reach
        cluster.attached = placement.brokers_from_image
        where = "local" if not placement.remote else f"{placement.kind} lab {placement.name}'s"
        verb = "checking the" if cluster.attached else "starting a"
        self.observer.phase(
            f"{verb} {s.cluster.nodes}-node {s.broker} cluster on the {where} hosts"
        )
        cluster.start(self.observer.phase)
        self.clusters[key] = (cluster, True)
        return cluster, False

    def close(self) -> None:
        for cluster, owned in self.clusters.values():
            if owned:
                self.observer.phase(f"stopping the {cluster.broker} cluster")
                with contextlib.suppress(MqlabError):
                    cluster.stop()
        self.clusters = {}


def placement_key(s: Scenario) -> tuple[str, ...]:
    c = s.cluster
    shape = (str(c.nodes), str(s.clients.sender_nodes), str(s.clients.receiver_nodes))
    if c.target == "local":
        return ("local",)
    if c.target == "netns":
        return ("netns", lab_name(s), repr(c.netns), *shape)
    return (c.target, c.inventory, str(s.source))
