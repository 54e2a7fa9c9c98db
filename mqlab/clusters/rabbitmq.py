"""RabbitMQ: 3 nodes of the Debian ``rabbitmq-server`` on one host, joined by classic config.

Each node has its own node name, AMQP and distribution ports and data/log dirs;
all share one HOME (the Erlang cookie). The management and prometheus plugins
are not enabled (no fixed HTTP ports). We start our own ``epmd`` on a free port
(``ERL_EPMD_PORT``) as a process we own, so stopping the cluster stops exactly
that epmd too. Node 0 boots first; nodes 1 and 2 then join it. Health means:
all nodes running in one cluster, and a probe quorum queue has a leader and 2
followers. Starting takes about 30 s here (CPU-bound): progress is reported.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

from mqlab import nodeconf
from mqlab.clusters import process
from mqlab.clusters.base import LocalCluster, Progress
from mqlab.clusters.process import ProcessRecord
from mqlab.drivers.base import Endpoints, NodeEndpoint
from mqlab.errors import ClusterError
from mqlab.nodeconf import rabbitmq as rabbitconf

RABBIT_LIB = Path("/usr/lib/rabbitmq/lib")
EPMD = Path("/usr/bin/epmd")
PROBE_QUEUE = "mqlab-health-probe"


def _sbin() -> Path:
    found = sorted(RABBIT_LIB.glob("rabbitmq_server-*/sbin"))
    if not found or not EPMD.exists():
        raise ClusterError(
            "rabbitmq-server not found under /usr/lib/rabbitmq "
            "(install the Debian packages: scripts/apt-packages.txt)"
        )
    return found[-1]


def node_name(index: int) -> str:
    """Node ``index``'s Erlang name in a local (loopback) cluster."""
    return rabbitconf.node_name(index, ("127.0.0.1",) * (index + 1))


class RabbitmqCluster(LocalCluster):
    broker = "rabbitmq"
    start_timeout_s = 180.0

    # -- recipe ---------------------------------------------------------------
    def _prepare(self, progress: Progress) -> None:
        ports = process.free_ports(self.nodes * 2 + 1)
        self.ports = {
            "amqp": ports[: self.nodes],
            "dist": ports[self.nodes : 2 * self.nodes],
            "epmd": ports[-1],
        }
        home = self.workdir / "home"
        home.mkdir(parents=True, exist_ok=True)
        cookie = home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)
        (self.workdir / "enabled_plugins").write_text("[].\n")
        (self.workdir / "rabbitmq-env.conf").write_text("# written by mqlab: no overrides\n")
        for i in range(self.nodes):
            d = self.workdir / f"n{i}"
            (d / "log").mkdir(parents=True, exist_ok=True)
            (d / "rabbitmq.conf").write_text(nodeconf.render(self._node(i))["rabbitmq.conf"])
        progress(f"starting epmd on port {self.ports['epmd']}")
        _p, rec = process.spawn(
            [str(EPMD), "-port", str(self.ports["epmd"])],
            self.workdir / "epmd.log",
            env=self._env(None),
        )
        self.extra["epmd"] = rec.to_json()
        deadline = time.monotonic() + 10
        while not process.port_open("127.0.0.1", self.ports["epmd"]):
            if time.monotonic() > deadline:
                raise ClusterError(f"epmd did not listen on {self.ports['epmd']}")
            time.sleep(0.05)

    def _env(self, index: int | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(
            HOME=str(self.workdir / "home"),
            ERL_EPMD_PORT=str(self.ports["epmd"]),
            ERL_EPMD_ADDRESS="127.0.0.1",
            RABBITMQ_CONF_ENV_FILE=str(self.workdir / "rabbitmq-env.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.workdir / "enabled_plugins"),
            LANG="C.UTF-8",
            LC_ALL="C.UTF-8",
            # no scheduler busy-waiting: 3 nodes share a few cores with the clients
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+sbwt none +sbwtdcpu none +sbwtdio none",
        )
        if index is not None:
            d = self.workdir / f"n{index}"
            env.update(rabbitconf.env(self._node(index)))
            env.update(
                RABBITMQ_CONFIG_FILE=str(d / "rabbitmq.conf"),
                RABBITMQ_ADVANCED_CONFIG_FILE=str(d / "advanced.config"),
                RABBITMQ_MNESIA_BASE=str(d / "mnesia"),
                RABBITMQ_LOG_BASE=str(d / "log"),
                RABBITMQ_PID_FILE=str(d / "rabbit.pid"),
            )
        return env

    def _node(self, index: int) -> nodeconf.Node:
        return self.node_conf(index, self.node_dir(index))

    def _start_node(self, index: int) -> ProcessRecord:
        d = self.workdir / f"n{index}"
        _p, rec = process.spawn(
            [str(_sbin() / "rabbitmq-server")], d / "server.log", env=self._env(index), cwd=d
        )
        return rec

    def _start_all(self, progress: Progress) -> None:
        """Node 0 first (the seed), then the others join it."""
        progress(f"starting rabbitmq node 0 ({node_name(0)})")
        self.procs[0] = self._start_node(0)
        self.save_state()
        self._wait_node_up(0, time.monotonic() + self.start_timeout_s, progress)
        for i in range(1, self.nodes):
            progress(f"starting rabbitmq node {i} ({node_name(i)})")
            self.procs[i] = self._start_node(i)

    def _wait_node_up(self, index: int, deadline: float, progress: Progress) -> None:
        t0 = time.monotonic()
        last = 0.0
        while not process.port_open("127.0.0.1", self.ports["amqp"][index]):
            if not process.is_alive(self.procs[index]):
                raise ClusterError(
                    f"rabbitmq node {index} exited; see {self.workdir / f'n{index}'}"
                )
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"rabbitmq node {index} not up after {self.start_timeout_s:.0f} s;"
                    f" logs in {self.workdir / f'n{index}'}"
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
                    f"running; logs in {self.workdir}"
                )
            time.sleep(1)
        progress("checking that a quorum queue gets a leader and followers")
        members = self.probe_quorum_queue()
        if members["leader"] is None or len(members["followers"]) != self.nodes - 1:
            raise ClusterError(f"rabbitmq quorum queue probe: {members}")
        self.extra["quorum_probe"] = members

    # -- checks ---------------------------------------------------------------
    def ctl(self, tool: str, *args: str, index: int = 0, timeout_s: float = 60) -> str:
        """Run a RabbitMQ CLI tool (rabbitmqctl, rabbitmq-queues...) against node ``index``."""
        cmd = [str(_sbin() / tool), "-n", node_name(index), *args]
        try:
            out = subprocess.run(
                cmd,
                env=self._env(index),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ClusterError(f"{tool} {' '.join(args)}: no answer in {timeout_s:.0f} s") from None
        if out.returncode != 0:
            raise ClusterError(
                f"{tool} {' '.join(args)} failed: {out.stderr.strip() or out.stdout.strip()}"
            )
        return out.stdout

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

        params = pika.ConnectionParameters(
            "127.0.0.1", self.ports["amqp"][0], connection_attempts=5, retry_delay=1
        )
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

    def health(self) -> dict[str, Any]:
        alive = self.alive()
        nodes = [
            {
                "index": i,
                "alive": a,
                "port": self.ports["amqp"][i],
                "name": node_name(i),
                "amqp": a and process.port_open("127.0.0.1", self.ports["amqp"][i]),
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
                NodeEndpoint(i, "127.0.0.1", p, {"node": node_name(i)})
                for i, p in enumerate(self.ports["amqp"])
            ),
        )

    def server_versions(self) -> list[str]:
        return [f"RabbitMQ {_sbin().parent.name.split('-', 1)[1]}"]

    def epmd_record(self) -> ProcessRecord | None:
        data = self.extra.get("epmd")
        return ProcessRecord.from_json(data) if data else None

    def _after_stop(self) -> None:
        rec = self.epmd_record()
        if rec is not None:
            process.stop(rec)
            self.extra.pop("epmd", None)


CLUSTER = RabbitmqCluster
