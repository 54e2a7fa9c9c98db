"""Redis: a primary and 2 replicas (``replicaof``) of the Debian ``redis-server``, AOF on,
and a Redis Sentinel beside every node that fails the primary over.

Node 0 starts as the primary; nodes 1.. replicate it. Every node appends to its AOF
(``appendfsync everysec``, Redis' default and mqperf's setup). Every node's host also
runs a sentinel (``redis-server sentinel.conf --sentinel``, the same binary, its own
port): the sentinels watch the primary and, once a majority agrees it is down, promote
a replica and point the others at it. Sentinels are processes the cluster owns: started
once the replicas are in sync, stopped first by ``stop()``; a killed node's sentinel
keeps running (``kill_node`` crashes the server, not the host).

Healthy means: the primary the sentinels name is a master with every replica connected
and in sync (``master_link_status:up``), and every sentinel knows that primary, all
its replicas and all the other sentinels, with a quorum it can reach (``SENTINEL
CKQUORUM``). ``leader()`` is the primary the sentinels name now. A restarted node
comes back as a replica of that primary (its ``redis.conf`` is rendered again for it).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqlab.brokers import nodeconf
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.brokers.redis import node as redisconf
from mqlab.errors import ClusterError
from mqlab.hosts.process import ProcessRecord

FIX = "install the Debian packages: scripts/apt-packages.txt"


def _local_binary() -> Path | None:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    return Path(found) if found else None


class RedisCluster(LocalCluster):
    broker = "redis"
    start_timeout_s = 45.0

    # -- processes --------------------------------------------------------------------
    def _prepare(self, progress: Progress) -> None:
        self.ports = self.pick_ports(["client", "sentinel"])
        self.extra["primary"] = 0
        for i in range(self.nodes):
            files = nodeconf.render(self.node_conf(i, self.node_dir(i)))
            self.write(i, "redis.conf", files["redis.conf"])
            self.write(i, "sentinel.conf", files["sentinel.conf"])

    def _exe(self, index: int) -> str:
        return self.binary(index, _local_binary(), "redis-server", FIX)

    def _start_node(self, index: int) -> ProcessRecord:
        d = self.node_dir(index)
        return self.host(index).spawn(
            [self._exe(index), str(d / "redis.conf")], d / "server.log", cwd=d
        )

    def _start_sentinel(self, index: int) -> None:
        """Start node ``index``'s sentinel on the config it keeps rewriting (its state)."""
        d = self.node_dir(index)
        rec = self.host(index).spawn(
            [self._exe(index), str(d / "sentinel.conf"), "--sentinel"], d / "sentinel.log", cwd=d
        )
        self.extra.setdefault("sentinels", {})[str(index)] = rec.to_json()
        self.save_state()

    def sentinel_records(self) -> dict[int, ProcessRecord]:
        """Node index -> the sentinel process this cluster started on that node's host."""
        data = self.extra.get("sentinels") or {}
        return {int(i): ProcessRecord.from_json(r) for i, r in data.items()}

    def _start_all(self, progress: Progress) -> None:
        super()._start_all(progress)
        self.save_state()
        # sentinels learn the replicas from the primary's INFO (every 10 s): start them
        # once the replicas are connected, so that they know them from their first INFO
        progress("waiting for the replicas to sync with the primary")
        deadline = time.monotonic() + self.start_timeout_s
        self._wait(lambda: self._replication(0)[1], deadline, "replicas not in sync", False)
        for i in range(self.nodes):
            progress(f"starting redis sentinel {i}")
            self._start_sentinel(i)

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for every sentinel to know the primary, the replicas and each other")
        self._wait(lambda: bool(self.health()["healthy"]), deadline, "not healthy", True)

    def _wait(self, ok: Callable[[], bool], deadline: float, what: str, sentinels: bool) -> None:
        while time.monotonic() < deadline:
            for i, alive in enumerate(self._servers_alive()):
                if not alive:
                    raise ClusterError(
                        f"redis node {i} exited; see {self.node_dir(i) / 'server.log'}"
                        f" on {self.host(i).name}"
                    )
            if sentinels:
                for i, alive in enumerate(self._sentinels_alive()):
                    if not alive:
                        raise ClusterError(
                            f"redis sentinel {i} exited; see "
                            f"{self.node_dir(i) / 'sentinel.log'} on {self.host(i).name}"
                        )
            if ok():
                return
            time.sleep(0.2)
        raise ClusterError(
            f"redis cluster {what} after {self.start_timeout_s:.0f} s; logs in {self.workdir}"
        )

    def _servers_alive(self) -> list[bool]:
        return super().alive()

    def _sentinels_alive(self) -> list[bool]:
        if self.attached:  # the image runs them: alive while they listen
            port = self.ports.get("sentinel")
            if not port:
                return [False] * self.nodes
            return [self.host(i).listening([port[i]])[0] for i in range(self.nodes)]
        recs = self.sentinel_records()
        return [i in recs and self.host(i).is_alive(recs[i]) for i in range(self.nodes)]

    def alive(self) -> list[bool]:
        """A node is alive while its server and its sentinel run."""
        return [
            a and b for a, b in zip(self._servers_alive(), self._sentinels_alive(), strict=True)
        ]

    def stop(self, remove_data: bool = True) -> None:
        if not self.attached:  # sentinels first: none fails over while the servers stop
            for i, rec in self.sentinel_records().items():
                self.host(i).stop(rec)
            self.extra.pop("sentinels", None)
        super().stop(remove_data)

    def restart_node(self, index: int) -> None:
        """Start node ``index`` again (and its sentinel, if that died too): as a replica of
        the primary the sentinels name now, or as the primary if they still name it."""
        self._own_processes("restart_node")
        recs = self.sentinel_records()
        if index in recs and not self.host(index).is_alive(recs[index]):
            self._start_sentinel(index)
        if index in self.procs and self.host(index).is_alive(self.procs[index]):
            return
        primary = self.primary()
        if primary is not None:  # None: no sentinel answers; keep the config on disk
            node = self.node_conf(index, self.node_dir(index))
            self.write(index, "redis.conf", redisconf.redis_conf(node, primary))
        super().restart_node(index)

    # -- clients ----------------------------------------------------------------------
    def _client(self, index: int, port: str = "client") -> Any:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        host, p = self.reach(self.addr(index), self.ports[port][index])
        return redis.Redis(
            host=host,
            port=p,
            socket_timeout=2,
            socket_connect_timeout=1,
            retry=Retry(NoBackoff(), 0),
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

    def node_index(self, address: str, port: int) -> int | None:
        """The node listening at ``address``:``port`` (as the sentinels name it)."""
        for i in range(self.nodes):
            if self.addr(i) == address and self.ports["client"][i] == int(port):
                return i
        return None

    def sentinel_view(self, index: int) -> dict[str, Any]:
        """What the sentinel on node ``index``'s host knows: the primary (node index), its
        config epoch, the replicas it sees up, the sentinels (itself included) and its
        quorum check; ``error`` when it does not answer."""
        import redis

        name = redisconf.MASTER_NAME
        if not self.ports.get("sentinel"):  # state written before the sentinels
            return {"index": index, "error": "no sentinel in this cluster's state"}
        view: dict[str, Any] = {"index": index, "port": self.ports["sentinel"][index]}
        c = self._client(index, "sentinel")
        try:
            master: Any = c.sentinel_master(name)
            replicas: Any = c.sentinel_slaves(name)
            try:
                c.execute_command("SENTINEL CKQUORUM", name)
                view["quorum"] = "OK"
            except redis.ResponseError as e:
                view["quorum"] = str(e)
        except (redis.RedisError, OSError) as e:
            view["error"] = str(e) or type(e).__name__
            return view
        finally:
            c.close()
        view |= {
            "primary": self.node_index(master["ip"], master["port"]),
            "epoch": int(master.get("config-epoch", 0)),
            "primary_down": bool(master["is_sdown"] or master["is_odown"]),
            "replicas": sorted(
                -1 if i is None else i  # -1: a replica that is no node of ours
                for i in (
                    self.node_index(r["ip"], r["port"])
                    for r in replicas
                    if not (r["is_sdown"] or r["is_odown"] or r["is_disconnected"])
                )
            ),
            "sentinels": int(master.get("num-other-sentinels", 0)) + 1,
        }
        return view

    @staticmethod
    def _named_primary(views: list[dict[str, Any]]) -> int | None:
        """The primary of the most recent configuration (highest epoch) a sentinel knows."""
        known = [v for v in views if v.get("primary") is not None]
        return max(known, key=lambda v: int(v["epoch"]))["primary"] if known else None

    def primary(self) -> int | None:
        """The node the sentinels name as the primary now (None: no sentinel answers)."""
        found = self._named_primary([self.sentinel_view(i) for i in range(self.nodes)])
        if found is not None:
            self.extra["primary"] = found
        return found

    def leader(self, driver: Any) -> int:
        """The primary as the sentinels report it now (every queue lives there)."""
        found = self.primary()
        if found is None:
            raise ClusterError("no redis sentinel names a primary")
        return found

    # -- health -----------------------------------------------------------------------
    def _replication(self, primary: int) -> tuple[list[dict[str, Any]], bool]:
        """Every node's replication and AOF state, and whether node ``primary`` is a master
        that every other node replicates, in sync."""
        nodes = []
        for i, alive in enumerate(self._servers_alive()):
            repl = self.info(i, "replication") if alive else {}
            persistence = self.info(i, "persistence") if alive else {}
            nodes.append(
                {
                    "index": i,
                    "alive": alive,
                    "port": self.ports["client"][i],
                    "role": repl.get("role"),
                    "link": repl.get("master_link_status"),
                    "master": (
                        self.node_index(str(repl["master_host"]), int(repl["master_port"]))
                        if "master_host" in repl
                        else None
                    ),
                    "connected_replicas": int(repl.get("connected_slaves", 0)),
                    "aof": persistence.get("aof_enabled") == 1,
                }
            )
        ok = (
            bool(nodes)
            and nodes[primary]["role"] == "master"
            and nodes[primary]["connected_replicas"] == self.nodes - 1
            and all(n["alive"] and n["aof"] for n in nodes)
            and all(
                n["role"] == "slave" and n["link"] == "up" and n["master"] == primary
                for n in nodes
                if n["index"] != primary
            )
        )
        return nodes, ok

    def health(self) -> dict[str, Any]:
        sentinels = [
            self.sentinel_view(i) if alive else {"index": i, "error": "not running"}
            for i, alive in enumerate(self._sentinels_alive())
        ]
        primary = self._named_primary(sentinels)
        if primary is not None:
            self.extra["primary"] = primary
        nodes, replicated = self._replication(primary if primary is not None else 0)
        others = sorted(set(range(self.nodes)) - {primary})
        sentinels_agree = all(
            "error" not in s
            and s["primary"] == primary
            and not s["primary_down"]
            and s["replicas"] == others
            and s["sentinels"] == self.nodes
            and s["quorum"] == "OK"
            for s in sentinels
        )
        return {
            "healthy": primary is not None and replicated and sentinels_agree,
            "primary": primary,
            "connected_replicas": nodes[primary]["connected_replicas"]
            if primary is not None
            else 0,
            "nodes": nodes,
            "sentinels": sentinels,
        }

    def endpoints(self) -> Endpoints:
        primary = int(self.extra.get("primary", 0))
        extra: dict[str, Any] = {}
        if self.ports.get("sentinel"):  # state written before the sentinels: none
            extra = {
                "sentinels": [[self.addr(i), p] for i, p in enumerate(self.ports["sentinel"])],
                "master": redisconf.MASTER_NAME,
            }
        return Endpoints(
            "redis",
            tuple(
                NodeEndpoint(
                    i,
                    self.addr(i),
                    p,
                    # address: the node as the sentinels name it (host and port may be
                    # rewritten for a coordinator that reaches the nodes through tunnels)
                    {
                        "role": "primary" if i == primary else "replica",
                        "address": f"{self.addr(i)}:{p}",
                    },
                )
                for i, p in enumerate(self.ports["client"])
            ),
            extra,
        )

    def server_versions(self) -> list[str]:
        out = self.host(0).run([self._exe(0), "--version"], check=False)
        return [out.out.strip()] if out.rc == 0 else []


CLUSTER = RedisCluster
