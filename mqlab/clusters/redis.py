"""Redis: a primary and 2 replicas (``--replicaof``) of the Debian ``redis-server``, AOF on.

Node 0 is the primary; nodes 1.. replicate it. Every node appends to its AOF
(``appendfsync everysec``, Redis' default and mqperf's setup). Healthy means:
the primary reports every replica connected and in sync (``master_link_status:up``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from mqlab import nodeconf
from mqlab.clusters.base import LocalCluster, Progress
from mqlab.clusters.process import ProcessRecord
from mqlab.drivers.base import Endpoints, NodeEndpoint
from mqlab.errors import ClusterError

FIX = "install the Debian packages: scripts/apt-packages.txt"


def _local_binary() -> Path | None:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    return Path(found) if found else None


class RedisCluster(LocalCluster):
    broker = "redis"
    start_timeout_s = 30.0

    def _prepare(self, progress: Progress) -> None:
        self.ports = self.pick_ports(["client"])
        for i in range(self.nodes):
            files = nodeconf.render(self.node_conf(i, self.node_dir(i)))
            self.write(i, "redis.conf", files["redis.conf"])

    def _start_node(self, index: int) -> ProcessRecord:
        d = self.node_dir(index)
        exe = self.binary(index, _local_binary(), "redis-server", FIX)
        return self.host(index).spawn([exe, str(d / "redis.conf")], d / "server.log", cwd=d)

    def _client(self, index: int) -> Any:
        import redis

        host, port = self.reach(self.addr(index), self.ports["client"][index])
        return redis.Redis(
            host=host,
            port=port,
            socket_timeout=2,
            socket_connect_timeout=1,
        )

    def info(self, index: int, section: str) -> dict[str, Any]:
        """``INFO section`` of node ``index`` ({} if it does not answer)."""
        import redis

        c = self._client(index)
        try:
            data: dict[str, Any] = c.info(section)
            return data
        except (redis.RedisError, OSError):
            return {}
        finally:
            c.close()

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for the replicas to sync with the primary")
        while time.monotonic() < deadline:
            for i, ok in enumerate(self.alive()):
                if not ok:
                    raise ClusterError(
                        f"redis node {i} exited; see {self.node_dir(i) / 'server.log'}"
                        f" on {self.host(i).name}"
                    )
            if self.health()["healthy"]:
                return
            time.sleep(0.1)
        raise ClusterError(
            f"redis cluster not healthy after {self.start_timeout_s:.0f} s; logs in {self.workdir}"
        )

    def health(self) -> dict[str, Any]:
        nodes = []
        for i, alive in enumerate(self.alive()):
            repl = self.info(i, "replication") if alive else {}
            persistence = self.info(i, "persistence") if alive else {}
            nodes.append(
                {
                    "index": i,
                    "alive": alive,
                    "port": self.ports["client"][i],
                    "role": repl.get("role"),
                    "link": repl.get("master_link_status"),
                    "aof": persistence.get("aof_enabled") == 1,
                }
            )
        primary = self.info(0, "replication") if nodes and nodes[0]["alive"] else {}
        replicas = int(primary.get("connected_slaves", 0))
        healthy = (
            bool(nodes)
            and nodes[0]["role"] == "master"
            and replicas == self.nodes - 1
            and all(n["alive"] and n["aof"] for n in nodes)
            and all(n["link"] == "up" for n in nodes[1:])
        )
        return {"healthy": healthy, "primary": 0, "connected_replicas": replicas, "nodes": nodes}

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "redis",
            tuple(
                NodeEndpoint(i, self.addr(i), p, {"role": "primary" if i == 0 else "replica"})
                for i, p in enumerate(self.ports["client"])
            ),
        )

    def server_versions(self) -> list[str]:
        exe = self.binary(0, _local_binary(), "redis-server", FIX)
        out = self.host(0).run([exe, "--version"], check=False)
        return [out.out.strip()] if out.rc == 0 else []


CLUSTER = RedisCluster
