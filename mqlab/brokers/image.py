"""Brokers the lab's images run, for brokers whose launcher cannot start nodes on hosts.

On an AWS lab (``placement.brokers_from_image``) the broker units of the NixOS images
(``images/brokers/<broker>.nix``) start every node at boot; mqlab only checks them
(``LocalCluster._attach``: the image on every host is this broker's) and leaves them
running. NATS, PostgreSQL, Redis and RabbitMQ attach with their own launchers, which run
on hosts. For the others (Kafka, Redpanda, Pulsar, MongoDB, Artemis: their launchers are
local stand-ins; RocketMQ, EventStoreDB: none) this module is the attach path, as the
broker's descriptor declares it (``Broker.attach``): clients get
every node's standard client port (its descriptor's ``ports``, the ports the images
open), and health is, per node, that its host listens on that port (``ss`` over SSH), that
it answers there as the coordinator reaches it (through the placement's ``reach``: an SSH
tunnel on AWS), and where the image serves one over HTTP, the broker's own readiness.
"""

from __future__ import annotations

import socket
import urllib.request
from typing import Any, ClassVar

from mqlab.brokers import nodeconf, registry
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.brokers.descriptor import Attach
from mqlab.errors import ClusterError
from mqlab.hosts.process import ProcessRecord

#: how long a node has to close a connection it cannot serve (a tunnel whose far end is
#: refused closes at once; a server waits for the client to speak first)
ANSWER_WAIT_S = 0.5
HTTP_TIMEOUT_S = 2.0


def answers(address: str, port: int, wait_s: float | None = None) -> bool:
    """Something accepts TCP at ``address:port`` and keeps the connection open (or speaks
    first): a loopback tunnel accepts every connection and closes it when its far end
    refused, so a bare connect says nothing there."""
    try:
        with socket.create_connection((address, port), timeout=HTTP_TIMEOUT_S) as sock:
            sock.settimeout(ANSWER_WAIT_S if wait_s is None else wait_s)
            try:
                return sock.recv(1) != b""
            except TimeoutError:
                return True  # open, and waiting for the client to speak first
    except OSError:
        return False


def http_ok(address: str, port: int, path: str) -> bool:
    """``GET http://address:port/path`` answered with a 2xx status."""
    try:
        with urllib.request.urlopen(f"http://{address}:{port}{path}", timeout=HTTP_TIMEOUT_S) as r:
            return 200 <= int(r.status) < 300
    except (OSError, ValueError):
        return False


class ImageCluster(LocalCluster):
    """The nodes the lab's images run, checked and handed to clients; never started here."""

    broker: ClassVar[str]
    spec: ClassVar[Attach]

    def __init__(
        self, workdir: Any, nodes: int | None = None, hosts: Any = None, server: Any = None
    ):
        if hosts is None or all(h.is_local for h in hosts):
            raise ClusterError(
                f"{self.broker}: mqlab attaches to the nodes a lab's images run, on the lab's "
                'broker hosts only (cluster.target = "aws")'
            )
        super().__init__(workdir, nodes, hosts, server=server)
        self.attached = True
        self.ports = {
            n: list(v) for n, v in nodeconf.standard_ports(self.broker, self.nodes).items()
        }

    # -- never started here (start() attaches: base.LocalCluster._attach) -------------
    def _prepare(self, progress: Progress) -> None:
        raise ClusterError(f"{self.broker}: the lab's images start the nodes, not mqlab")

    def _start_node(self, index: int) -> ProcessRecord:
        raise ClusterError(f"{self.broker}: the lab's images start the nodes, not mqlab")

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        raise ClusterError(f"{self.broker}: the lab's images start the nodes, not mqlab")

    # -- what clients get ------------------------------------------------------------
    def port(self, name: str, index: int) -> int:
        return int(self.ports[name][index])

    def endpoints(self) -> Endpoints:
        s = self.spec
        nodes = tuple(
            NodeEndpoint(
                i,
                self.addr(i),
                self.port(s.client, i),
                {p: self.port(p, i) for p in s.node_ports},
            )
            for i in range(self.nodes)
        )
        return Endpoints(self.broker, nodes, self._extra())

    def _extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "admin_urls" in self.spec.extra:
            out["admin_urls"] = [
                f"http://{self.addr(i)}:{self.port('http', i)}" for i in range(self.nodes)
            ]
        if "replica_set" in self.spec.extra:
            settings = self.image[0].get("settings") if self.image else None
            name = (settings or {}).get("replSetName", "mqlab")
            out["replica_set"] = str(name)
        return out

    # -- health ----------------------------------------------------------------------
    def alive(self) -> list[bool]:
        """A node runs while its host listens on one of its ports (``ss`` over SSH)."""
        names = self.spec.running or (self.spec.client,)
        out = []
        for i in range(self.nodes):
            listens = self.host(i).listening([self.port(n, i) for n in names])
            out.append(any(listens))
        return out

    def node_health(self, index: int) -> dict[str, Any]:
        s = self.spec
        names = s.running or (s.client,)
        listens = dict(
            zip(
                names, self.host(index).listening([self.port(n, index) for n in names]), strict=True
            )
        )
        node: dict[str, Any] = {
            "index": index,
            "host": self.host(index).name,
            "port": self.port(s.client, index),
            "listening": listens,
            "answers": False,
            "ready": None,
        }
        if listens.get(s.client):
            node["answers"] = answers(*self.reach(self.addr(index), self.port(s.client, index)))
        if s.ready is not None and node["answers"]:
            name, path = s.ready
            node["ready"] = http_ok(*self.reach(self.addr(index), self.port(name, index)), path)
        return node

    def health(self) -> dict[str, Any]:
        nodes = [self.node_health(i) for i in range(self.nodes)]
        serving = [n["answers"] and n["ready"] is not False for n in nodes]
        if self.spec.serving == "any":  # one node serves, the others run (Artemis' backups)
            healthy = any(serving) and all(any(n["listening"].values()) for n in nodes)
        else:  # every node serves and listens on each of its ports
            healthy = all(serving) and all(all(n["listening"].values()) for n in nodes)
        return {"healthy": healthy, "nodes": nodes}

    def leader(self, driver: Any) -> int:
        """Node 0: which node leads the queue is not asked of these brokers here (Kafka's
        partition leaders, Pulsar's topic owner, MongoDB's primary, RocketMQ's DLedger
        leader, EventStoreDB's leader are each the broker's own choice); node 0 is the
        primary where the image fixes one (MongoDB's initiator, Artemis' live server)."""
        return 0

    def server_versions(self) -> list[str]:
        return self.attached_versions()


def attachable() -> list[str]:
    """Brokers whose descriptor has an attach entry (``Broker.attach``)."""
    return sorted(b.name for b in registry.BROKERS.values() if b.attach is not None)


def image_cluster(broker: str) -> type[ImageCluster]:
    """The attach class of ``broker``'s image (a ClusterError if mqlab builds none)."""
    info = registry.BROKERS.get(broker)
    spec = info.attach if info is not None else None
    if spec is None:
        raise ClusterError(
            f"{broker}: mqlab builds no broker image for it that a run can attach to "
            f"(attachable: {', '.join(attachable())})"
        )
    name = "".join(p.title() for p in broker.split("_")) + "ImageCluster"
    attrs = {
        "broker": broker,
        "spec": spec,
        "follows_advertised": spec.follows_advertised,
        "__module__": __name__,
    }
    return type(name, (ImageCluster,), attrs)
