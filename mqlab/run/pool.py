"""Broker clusters for a sequence of runs: one per broker and placement for a whole
sweep, or the one ``mqlab cluster up`` left running."""

from __future__ import annotations

import contextlib
import json
import time

from mqlab.brokers import local, registry
from mqlab.brokers.cluster import LocalCluster
from mqlab.errors import ClusterError, MqlabError
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
        server = server_config(s, placement)
        base = f"{kind}:{s.cluster.nodes}:{placement.kind}:{placement.name}"
        key = f"{base}:{json.dumps(server, sort_keys=True)}" if server else base
        if key in self.clusters:
            cluster, owned = self.clusters[key]
            if all(cluster.alive()):
                return cluster, not owned
            cluster.stop()  # a node died in an earlier run and was not restarted: start afresh
            del self.clusters[key]
        running = local.find_running(s.broker) if not placement.remote else None
        if running is not None and running.nodes == s.cluster.nodes and running.server == server:
            self.observer.phase(f"using the local {s.broker} cluster that is already up")
            self.clusters[key] = (running, False)
            return running, True
        self._stop_other_configurations(base, key)
        workdir = local.state_dir() / "runs" / f"cluster-{kind or s.broker}-{time.time_ns()}"
        # a lab whose images run the brokers (AWS): the class that attaches to them
        cls = (
            local.attach_class(s.broker)
            if placement.brokers_from_image
            else local.cluster_class(s.broker)
        )
        hosts = placement.brokers if placement.remote else None
        cluster = cls(workdir, s.cluster.nodes, hosts, server=server)
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

    def _stop_other_configurations(self, base: str, key: str) -> None:
        """A cluster of this broker and placement that this pool started for another server
        configuration (a sweep over profiles that start the servers differently) is stopped
        before the next one starts: two sets of JVMs side by side on a small machine."""
        for other in list(self.clusters):
            cluster, owned = self.clusters[other]
            same_base = other == base or other.startswith(base + ":{")
            if other != key and same_base and owned:
                self.observer.phase(f"stopping the {cluster.broker} cluster started otherwise")
                with contextlib.suppress(MqlabError):
                    cluster.stop()
                del self.clusters[other]

    def close(self) -> None:
        for cluster, owned in self.clusters.values():
            if owned:
                self.observer.phase(f"stopping the {cluster.broker} cluster")
                with contextlib.suppress(MqlabError):
                    cluster.stop()
        self.clusters = {}


def server_config(s: Scenario, placement: Placement) -> dict[str, object]:
    """What the scenario's profile asks the servers to be started with (``LocalCluster.
    server_config``); a lab whose images run the brokers starts them as its images say,
    so such a profile cannot run there."""
    info = registry.BROKERS[s.broker]
    if info.local_cluster is None:
        return {}
    server = local.cluster_class(s.broker).server_config(s.profile.settings)
    if server and placement.brokers_from_image:
        raise ClusterError(
            f"{s.source}: profile {s.profile.name} starts the {s.broker} servers otherwise "
            f"({json.dumps(server, sort_keys=True)}) than the lab's images do; run it on the "
            "local cluster, or pick a profile of the images' layout"
        )
    return server


def placement_key(s: Scenario) -> tuple[str, ...]:
    c = s.cluster
    shape = (str(c.nodes), str(s.clients.sender_nodes), str(s.clients.receiver_nodes))
    if c.target == "local":
        return ("local",)
    if c.target == "netns":
        return ("netns", lab_name(s), repr(c.netns), *shape)
    return (c.target, c.inventory, str(s.source))
