"""Redis: a primary and 2 replicas (``--replicaof``) of the Debian ``redis-server``, AOF on.

Node 0 is the primary; nodes 1.. replicate it. Every node appends to its AOF
(``appendfsync everysec``, Redis' default and mqperf's setup). Healthy means:
the primary reports every replica connected and in sync (``master_link_status:up``).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from mqlab.clusters import process
from mqlab.clusters.base import LocalCluster, Progress
from mqlab.clusters.process import ProcessRecord
from mqlab.drivers.base import Endpoints, NodeEndpoint
from mqlab.errors import ClusterError


def _binary() -> str:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if found is None:
        raise ClusterError(
            "redis-server not found (install the Debian packages: scripts/apt-packages.txt)"
        )
    return found


class RedisCluster(LocalCluster):
    broker = "redis"
    start_timeout_s = 30.0

    def _prepare(self, progress: Progress) -> None:
        self.ports = {"client": process.free_ports(self.nodes)}
        for i in range(self.nodes):
            d = self.workdir / f"n{i}"
            d.mkdir(parents=True, exist_ok=True)
            lines = [
                "# written by mqlab",
                "bind 127.0.0.1",
                f"port {self.ports['client'][i]}",
                f"dir {d}",
                "daemonize no",
                'save ""',
                "appendonly yes",
                "appendfsync everysec",
                "repl-diskless-sync yes",
                "repl-diskless-sync-delay 0",
                "protected-mode no",
                "maxmemory-policy noeviction",
            ]
            if i > 0:
                lines.append(f"replicaof 127.0.0.1 {self.ports['client'][0]}")
            (d / "redis.conf").write_text("\n".join(lines) + "\n")

    def _start_node(self, index: int) -> ProcessRecord:
        d = self.workdir / f"n{index}"
        _p, rec = process.spawn([_binary(), str(d / "redis.conf")], d / "server.log", cwd=d)
        return rec

    def _client(self, index: int) -> Any:
        import redis

        return redis.Redis(
            host="127.0.0.1",
            port=self.ports["client"][index],
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
                        f"redis node {i} exited; see {self.workdir / f'n{i}' / 'server.log'}"
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
                NodeEndpoint(i, "127.0.0.1", p, {"role": "primary" if i == 0 else "replica"})
                for i, p in enumerate(self.ports["client"])
            ),
        )

    def server_versions(self) -> list[str]:
        out = subprocess.run([_binary(), "--version"], capture_output=True, text=True, check=False)
        return [out.stdout.strip()] if out.returncode == 0 else []


CLUSTER = RedisCluster
