"""RabbitMQ: 3 nodes of the Debian ``rabbitmq-server`` joined by classic config.

Locally all nodes run on 127.0.0.1 with free ports and short names
(``mqlab-rabbit<i>@localhost``); on a lab node ``i`` runs on its own host at that
host's address on the standard ports, with a long name (``mqlab-rabbit<i>@<address>``),
started over SSH. Both render their files with ``mqlab.brokers.rabbitmq.node``.

Each node has its own HOME (one Erlang cookie, made for this cluster), data and log
dirs. The management and prometheus plugins are not enabled. mqlab starts the
``epmd`` of every host the nodes run on (locally one on a free port, on a lab one per
host on port 4369 bound to the host's address) as processes it owns, so stopping the
cluster stops exactly those epmd too. Node 0 boots first; the others then join it.
Health means: all nodes running in one cluster, and a probe quorum queue has a leader
and 2 followers. Starting takes about 30 s here (CPU-bound): progress is reported.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path, PurePosixPath
from typing import Any

from mqlab.brokers import nodeconf
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.brokers.rabbitmq import node as rabbitconf
from mqlab.errors import ClusterError, FleetError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord

RABBIT_LIB = Path("/usr/lib/rabbitmq/lib")
EPMD = Path("/usr/bin/epmd")
PROBE_QUEUE = "mqlab-health-probe"
FIX = "install the Debian packages: scripts/apt-packages.txt"
# what the server scripts need on a host reached over SSH (spawned with a clean environment)
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _sbin() -> Path:
    found = sorted(RABBIT_LIB.glob("rabbitmq_server-*/sbin"))
    if not found or not EPMD.exists():
        raise ClusterError(f"rabbitmq-server not found under /usr/lib/rabbitmq ({FIX})")
    return found[-1]


def node_name(index: int) -> str:
    """Node ``index``'s Erlang name in a local (loopback) cluster."""
    return rabbitconf.node_name(index, ("127.0.0.1",) * (index + 1))


class RabbitmqCluster(LocalCluster):
    broker = "rabbitmq"
    start_timeout_s = 180.0

    def name(self, index: int) -> str:
        """Node ``index``'s Erlang node name."""
        return rabbitconf.node_name(index, [self.addr(n) for n in range(self.nodes)])

    # -- where things are on each host ----------------------------------------------
    def sbin(self, index: int) -> PurePosixPath:
        """The RabbitMQ server's sbin directory on node ``index``'s host."""
        h = self.host(index)
        if h.is_local:
            return PurePosixPath(str(_sbin()))
        found = h.run(
            ["sh", "-c", f"ls -d {RABBIT_LIB}/rabbitmq_server-*/sbin | sort | tail -n 1"],
            check=False,
        ).out.strip()
        if not found:
            raise ClusterError(f"{h.name}: rabbitmq-server not found under {RABBIT_LIB} ({FIX})")
        return PurePosixPath(found)

    def _host_groups(self) -> dict[int, list[int]]:
        """Node indexes by host (``id`` of the host): one epmd per host."""
        groups: dict[int, list[int]] = {}
        for i in range(self.nodes):
            groups.setdefault(id(self.hosts[i]), []).append(i)
        return groups

    # -- recipe ---------------------------------------------------------------
    def _prepare(self, progress: Progress) -> None:
        if self.on_hosts:
            std = nodeconf.standard_ports(self.broker, self.nodes)
            self.ports = {"amqp": list(std["amqp"]), "dist": list(std["dist"])}
            self.ports["epmd"] = std["epmd"][0]
        else:
            ports = process.free_ports(self.nodes * 2 + 1)
            self.ports = {
                "amqp": ports[: self.nodes],
                "dist": ports[self.nodes : 2 * self.nodes],
                "epmd": ports[-1],
            }
        cookie = secrets.token_hex(16).upper()
        self.extra["sbin"] = [str(self.sbin(i)) for i in range(self.nodes)]
        for i in range(self.nodes):
            files = nodeconf.render(self._node(i))
            self.write(i, "rabbitmq.conf", files["rabbitmq.conf"])
            self.write(i, "enabled_plugins", "[].\n")
            self.write(i, "rabbitmq-env.conf", "# written by mqlab: no overrides\n")
            self.host(i).write_file(self.node_dir(i) / "home" / ".erlang.cookie", cookie, 0o400)
            self.host(i).mkdir(self.node_dir(i) / "log")
        self.extra["epmd"] = []
        for idx in self._host_groups().values():
            i = idx[0]
            h = self.host(i)
            progress(f"starting epmd on {h.name} port {self.ports['epmd']}")
            epmd = self.binary(i, EPMD, "epmd", FIX)
            rec = h.spawn(
                [epmd, "-port", str(self.ports["epmd"])],
                self.node_dir(i) / "epmd.log",
                env=self._env(i, node=False),
            )
            self.extra["epmd"].append({"node": i, "process": rec.to_json()})
            self.save_state()
            deadline = time.monotonic() + 10
            while not process.port_open(self.addr(i), self.ports["epmd"]):
                if time.monotonic() > deadline:
                    raise ClusterError(f"{h.name}: epmd did not listen on {self.ports['epmd']}")
                time.sleep(0.05)

    def _env(self, index: int, node: bool = True) -> dict[str, str]:
        """The environment of node ``index``'s processes (or only its host's epmd)."""
        d = self.node_dir(index)
        if self.host(index).is_local:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        else:  # spawned over SSH with nothing else (env -i)
            env = {"PATH": HOST_PATH}
        env.update(
            HOME=str(d / "home"),
            ERL_EPMD_PORT=str(self.ports["epmd"]),
            ERL_EPMD_ADDRESS=self.addr(index),
            LANG="C.UTF-8",
            LC_ALL="C.UTF-8",
        )
        if not node:
            return env
        env.update(rabbitconf.env(self._node(index)))
        env.update(
            RABBITMQ_CONF_ENV_FILE=str(d / "rabbitmq-env.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(d / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(d / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(d / "advanced.config"),
            RABBITMQ_MNESIA_BASE=str(d / "mnesia"),
            RABBITMQ_LOG_BASE=str(d / "log"),
            RABBITMQ_PID_FILE=str(d / "rabbit.pid"),
            # no scheduler busy-waiting: nodes share a few cores with the clients
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+sbwt none +sbwtdcpu none +sbwtdio none",
        )
        return env

    def _node(self, index: int) -> nodeconf.Node:
        return self.node_conf(index, self.node_dir(index))

    def _sbin_of(self, index: int) -> PurePosixPath:
        known = self.extra.get("sbin") or []
        return PurePosixPath(known[index]) if index < len(known) else self.sbin(index)

    def _start_node(self, index: int) -> ProcessRecord:
        d = self.node_dir(index)
        return self.host(index).spawn(
            [str(self._sbin_of(index) / "rabbitmq-server")],
            d / "server.log",
            env=self._env(index),
            cwd=d,
        )

    def _start_all(self, progress: Progress) -> None:
        """Node 0 first (the seed), then the others join it."""
        progress(f"starting rabbitmq node 0 ({self.name(0)})")
        self.procs[0] = self._start_node(0)
        self.save_state()
        self._wait_node_up(0, time.monotonic() + self.start_timeout_s, progress)
        for i in range(1, self.nodes):
            progress(f"starting rabbitmq node {i} ({self.name(i)})")
            self.procs[i] = self._start_node(i)

    def _where(self, index: int) -> str:
        return f"{self.node_dir(index)} on {self.host(index).name}"

    def _wait_node_up(self, index: int, deadline: float, progress: Progress) -> None:
        t0 = time.monotonic()
        last = 0.0
        while not process.port_open(self.addr(index), self.ports["amqp"][index]):
            if not self.host(index).is_alive(self.procs[index]):
                raise ClusterError(f"rabbitmq node {index} exited; see {self._where(index)}")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"rabbitmq node {index} not up after {self.start_timeout_s:.0f} s;"
                    f" logs in {self._where(index)}"
                )
            if time.monotonic() - last > 5:
                last = time.monotonic()
                progress(f"waiting for rabbitmq node {index} to boot ({last - t0:.0f} s)")
            time.sleep(0.25)

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        for i in range(self.nodes):
            self._wait_node_up(i, deadline, progress)
        progress("checking that all rabbitmq nodes run in one cluster")
        while True:
            running = self.running_nodes()
            if len(running) == self.nodes:
                break
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"rabbitmq cluster has {len(running)} of {self.nodes} nodes "
                    f"running; logs in {self._where(0)}"
                )
            time.sleep(1)
        progress("checking that a quorum queue gets a leader and followers")
        members = self.probe_quorum_queue()
        if members["leader"] is None or len(members["followers"]) != self.nodes - 1:
            raise ClusterError(f"rabbitmq quorum queue probe: {members}")
        self.extra["quorum_probe"] = members

    # -- checks ---------------------------------------------------------------
    def ctl(self, tool: str, *args: str, index: int = 0, timeout_s: float = 60) -> str:
        """Run a RabbitMQ CLI tool (rabbitmqctl, rabbitmq-queues...) against node ``index``,
        on that node's host."""
        cmd = [str(self._sbin_of(index) / tool), "-n", self.name(index), *args]
        what = f"{tool} {' '.join(args)}"
        try:
            out = self.host(index).run(cmd, env=self._env(index), timeout_s=timeout_s, check=False)
        except FleetError as e:
            raise ClusterError(f"{what}: {e}") from None
        if out.rc != 0:
            raise ClusterError(f"{what} failed: {out.err.strip() or out.out.strip()}")
        return out.out

    def running_nodes(self, index: int = 0) -> list[str]:
        try:
            data = json.loads(
                self.ctl("rabbitmqctl", "cluster_status", "--formatter", "json", index=index)
            )
        except (ClusterError, ValueError):
            return []
        nodes: list[str] = data.get("running_nodes", [])
        return nodes

    def quorum_members(self, queue: str, index: int = 0) -> dict[str, Any]:
        """Leader and followers of quorum queue ``queue`` as RabbitMQ reports them."""
        rows = json.loads(
            self.ctl("rabbitmq-queues", "quorum_status", queue, "--formatter", "json", index=index)
        )
        leader = None
        followers = []
        for row in rows:
            state = str(row.get("Raft State", ""))
            node = str(row.get("Node Name", ""))
            if state == "leader":
                leader = node
            elif state == "follower":
                followers.append(node)
        return {"queue": queue, "leader": leader, "followers": sorted(followers)}

    def probe_quorum_queue(self) -> dict[str, Any]:
        import pika

        host, port = self.reach(self.addr(0), self.ports["amqp"][0])
        params = pika.ConnectionParameters(host, port, connection_attempts=5, retry_delay=1)
        conn = pika.BlockingConnection(params)
        try:
            ch = conn.channel()
            ch.queue_declare(
                PROBE_QUEUE,
                durable=True,
                arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": self.nodes},
            )
            deadline = time.monotonic() + 30
            while True:
                members = self.quorum_members(PROBE_QUEUE)
                if members["leader"] and len(members["followers"]) == self.nodes - 1:
                    break
                if time.monotonic() > deadline:
                    break
                time.sleep(1)
            ch.queue_delete(PROBE_QUEUE)
            return members
        finally:
            conn.close()

    def leader(self, driver: Any) -> int:
        """The node leading the driver's quorum queue (``rabbitmq-queues quorum_status``)."""
        for i in range(self.nodes):
            try:
                name = self.quorum_members(driver.queue, index=i)["leader"]
            except (ClusterError, ValueError):
                continue  # ask another node
            names = [self.name(n) for n in range(self.nodes)]
            if name in names:
                return names.index(name)
        raise ClusterError(f"rabbitmq: no node names a leader of quorum queue {driver.queue}")

    def health(self) -> dict[str, Any]:
        alive = self.alive()
        nodes = [
            {
                "index": i,
                "alive": a,
                "host": self.host(i).name,
                "port": self.ports["amqp"][i],
                "name": self.name(i),
                # attached: alive already means the host listens on the AMQP port
                "amqp": a
                and (self.attached or process.port_open(self.addr(i), self.ports["amqp"][i])),
            }
            for i, a in enumerate(alive)
        ]
        running = self.running_nodes() if nodes and nodes[0]["amqp"] else []
        healthy = all(n["amqp"] for n in nodes) and len(running) == self.nodes
        return {"healthy": healthy, "running_nodes": running, "nodes": nodes}

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "rabbitmq",
            tuple(
                NodeEndpoint(i, self.addr(i), p, {"node": self.name(i)})
                for i, p in enumerate(self.ports["amqp"])
            ),
        )

    def server_versions(self) -> list[str]:
        return [f"RabbitMQ {self._sbin_of(0).parent.name.split('-', 1)[1]}"]

    def epmd_records(self) -> list[tuple[int, ProcessRecord]]:
        """(node index whose host runs it, process) of every epmd this cluster started."""
        data = self.extra.get("epmd") or []
        if isinstance(data, dict):  # state written before epmd per host
            return [(0, ProcessRecord.from_json(data))]
        return [(int(e["node"]), ProcessRecord.from_json(e["process"])) for e in data]

    def _after_stop(self) -> None:
        for i, rec in self.epmd_records():
            self.host(i).stop(rec)
        self.extra.pop("epmd", None)


CLUSTER = RabbitmqCluster
