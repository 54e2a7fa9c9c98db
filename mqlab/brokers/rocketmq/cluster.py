"""Apache RocketMQ 5 on this machine, from Maven Central (``servers.toml``'s ``rocketmq``):
one name server, one broker group of 3 brokers whose commit log is one DLedger (Raft)
group, and one gRPC proxy in cluster mode, which is what the Python client speaks to.

Why DLedger and not controller mode: Raft gives the group its own leader election (no
controller process to run and keep alive), and a send is answered SEND_OK only once a
majority of the group (2 of 3) appended the message to its log: synchronous replication
to a quorum, whichever broker leads. The leader alone takes writes; the proxy finds it
through the name server (the leader registers as broker id 0). DLedger flushes its log
on its own timer (every 10 ms), not per message: no node fsyncs before the answer.

Node ``i`` is broker ``i`` (``kill_node``, ``pause_node`` act on it). The name server and
the proxy run beside node 0 as services of the cluster (stopped with it; a fault on a
node leaves them running). JVM sizes are small (``HEAP``, ``DIRECT``) and the commit log's
files 64 MiB, not the 8 GiB heap, 15 GiB direct memory and 1 GiB files of RocketMQ's own
scripts. This machine only: the lab images run RocketMQ themselves (``node.py``).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from mqlab.brokers import servers
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.brokers.nodeconf import lines, props
from mqlab.brokers.rocketmq import admin
from mqlab.brokers.rocketmq import node as rmqconf
from mqlab.errors import ClusterError, DriverError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord

HEAP = "512m"
DIRECT = "512m"
SERVICE_HEAP = {"namesrv": "192m", "proxy": "384m"}
COMMIT_LOG_FILE = 64 * 1024 * 1024
MIN_INVISIBLE_MS = 1000  # the proxy's shortest invisible duration (its default: 10 s)
ADMIN_TIMEOUT_S = 2.0
STOP_S = 5.0  # SIGTERM, then SIGKILL
PROXY_STARTS = 2  # the proxy exits when the group loses its leader while it starts
# what JDK 17 must open to RocketMQ (its scripts pass the same)
JDK17 = [
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
]
MAIN = {
    "namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
    "broker": "org.apache.rocketmq.broker.BrokerStartup",
    "proxy": "org.apache.rocketmq.proxy.ProxyStartup",
}


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def broker_ports(n: int) -> list[int]:
    """``n`` broker listen ports whose neighbours are free too: a broker also listens on
    ``port - 2`` (its VIP channel) and ``port + 1`` (its HA service)."""
    out: list[int] = []
    while len(out) < n:
        for p in process.free_ports(8):
            near = range(p - 2, p + 2)
            taken = {q for o in out for q in range(o - 2, o + 2)}
            if p > 1026 and not taken & set(near) and all(_free(q) for q in near):
                out.append(p)
                if len(out) == n:
                    break
    return out


def jvm(heap: str, direct: str | None = None) -> list[str]:
    flags = [f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow"]
    if direct:
        flags.append(f"-XX:MaxDirectMemorySize={direct}")
    return flags + JDK17


def broker_conf(c: RocketmqCluster, index: int) -> dict[str, Any]:
    """Node ``index``'s broker.conf: node.py's DLedger settings, sized for this machine."""
    files = rmqconf.render(c.node_conf(index, c.node_dir(index) / "store"))
    conf: dict[str, Any] = {}
    for line in files["broker.conf"].splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            conf[k.strip()] = v.strip()
    conf |= {
        "namesrvAddr": c.namesrv_addr(),
        "mappedFileSizeCommitLog": COMMIT_LOG_FILE,
        "mappedFileSizeTimerLog": 16 * 1024 * 1024,
        "diskMaxUsedSpaceRatio": 95,
        "autoCreateTopicEnable": False,
        "flushDiskType": "ASYNC_FLUSH",
        "sendMessageThreadPoolNums": 4,
    }
    return conf


class RocketmqCluster(LocalCluster):
    broker = "rocketmq"
    start_timeout_s = 240.0  # 90 s here with the machine's 2 cores busy
    runs_on_hosts = False  # the lab images run RocketMQ (node.py): this machine only

    # -- configuration ---------------------------------------------------------------
    def namesrv_addr(self) -> str:
        return f"{self.addr(0)}:{self.ports['namesrv'][0]}"

    def _prepare(self, progress: Progress) -> None:
        if self.on_hosts:
            raise ClusterError("rocketmq: the local launcher runs on this machine only")
        self.home = servers.home("rocketmq")  # raises the one-line fetch hint when missing
        picked = self.pick_ports(["dledger", "namesrv", "proxy", "proxy_remoting"])
        self.ports = {"broker": broker_ports(self.nodes), **picked}
        for i in range(self.nodes):
            self.hosts[i].mkdir(self.node_dir(i) / "store")
            self.write(i, "broker.conf", lines(props(broker_conf(self, i))))
        self.write(0, "namesrv.conf", lines(props({"listenPort": self.ports["namesrv"][0]})))
        proxy = {
            "rocketMQClusterName": rmqconf.CLUSTER,
            "namesrvAddr": self.namesrv_addr(),
            "proxyMode": "cluster",
            "grpcServerPort": self.ports["proxy"][0],
            "remotingListenPort": self.ports["proxy_remoting"][0],
            "minInvisibleTimeMillsForRecv": MIN_INVISIBLE_MS,
            # routes looked up again every 2 s (default 20 s): after a leader change the
            # proxy sends to the new leader within seconds
            "topicRouteServiceCacheRefreshSeconds": 2,
            "topicRouteServiceCacheExpiredSeconds": 10,
            # a certificate made here at once, not the proxy's self-signed one (its test
            # mode: ~20 s of its start on this machine); clients speak plaintext gRPC
            "tlsTestModeEnable": False,
            "tlsKeyPath": str(self.node_dir(0) / "tls.key"),
            "tlsCertPath": str(self.node_dir(0) / "tls.crt"),
        }
        self._certificate()
        self.write(0, "rmq-proxy.json", json.dumps(proxy, indent=2, sort_keys=True) + "\n")

    def _certificate(self) -> None:
        d = self.node_dir(0)
        cmd = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650"]
        cmd += ["-keyout", str(d / "tls.key"), "-out", str(d / "tls.crt"), "-subj", "/CN=localhost"]
        r = self.host(0).run(cmd, check=False)
        if r.rc != 0:
            raise ClusterError(f"rocketmq: openssl could not make the proxy's certificate: {r.err}")

    def _java(self, index: int, what: str, flags: list[str], args: list[str]) -> ProcessRecord:
        d = self.node_dir(index)
        home = d / what if what != "broker" else d
        self.hosts[index].mkdir(home / "tmp")
        cmd = [
            str(servers.java(servers.pin("rocketmq").java)),
            *flags,
            f"-Duser.home={home}",  # RocketMQ logs under ~/logs/rocketmqlogs
            # the JVM's temporary files (RocksDB's native library, the proxy's self-signed
            # certificate) go with the node's data, not into /tmp where a killed JVM leaves them
            f"-Djava.io.tmpdir={home / 'tmp'}",
            f"-Drocketmq.home.dir={home}",
            "-cp",
            servers.classpath("rocketmq"),
            MAIN[what],
            *args,
        ]
        env = {"ROCKETMQ_HOME": str(home)}
        return self.host(index).spawn(cmd, d / f"{what}.out", env=env, cwd=home)

    def _start_service(self, what: str, args: list[str]) -> None:
        rec = self._java(0, what, jvm(SERVICE_HEAP[what], "128m"), args)
        self.extra.setdefault("services", {})[what] = rec.to_json()

    def _start_all(self, progress: Progress) -> None:
        progress("starting the rocketmq name server")
        self._start_service("namesrv", ["-c", str(self.node_dir(0) / "namesrv.conf")])
        super()._start_all(progress)

    def _start_proxy(self, progress: Progress) -> None:
        """Started once the group has a leader: at its start the proxy creates its system
        topics on the group's master, and exits when there is none."""
        progress("starting the rocketmq proxy (cluster mode)")
        conf = str(self.node_dir(0) / "rmq-proxy.json")
        self._start_service("proxy", ["-pc", conf, "-pm", "cluster"])
        self.save_state()

    def _start_node(self, index: int) -> ProcessRecord:
        conf = self.node_dir(index) / "broker.conf"
        return self._java(index, "broker", jvm(HEAP, DIRECT), ["-c", str(conf)])

    def services(self) -> dict[str, ProcessRecord]:
        raw = self.extra.get("services") or {}
        return {k: ProcessRecord.from_json(v) for k, v in raw.items()}

    def stop(self, remove_data: bool = True) -> None:
        """Every broker stopped at once, each given ``STOP_S`` to shut down (their shutdown
        hooks take longer here), then the proxy and the name server (``_after_stop``)."""
        if not self.attached and self.procs:
            procs = dict(self.procs)
            self._each(list(procs), lambda i: self.hosts[i].stop(procs[i], timeout_s=STOP_S))
            self.procs = {}
        super().stop(remove_data)

    def _after_stop(self) -> None:
        for what in ("proxy", "namesrv"):
            rec = self.services().get(what)
            if rec is not None:
                self.hosts[0].stop(rec, timeout_s=STOP_S)
        self.extra.pop("services", None)

    # -- health ----------------------------------------------------------------------
    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for the DLedger group's leader, its followers and the proxy")
        last: dict[str, Any] = {}
        proxy_starts = 0
        while time.monotonic() < deadline:
            for i, ok in enumerate(self.alive()):
                if not ok:
                    raise ClusterError(
                        f"rocketmq broker {i} exited; see {self.node_dir(i) / 'broker.out'} "
                        f"and {self.node_dir(i) / 'logs'}"
                    )
            for what, rec in self.services().items():
                if self.hosts[0].is_alive(rec):
                    continue
                if what == "proxy" and proxy_starts < PROXY_STARTS:
                    self.extra["services"].pop("proxy")  # started again below
                    continue
                raise ClusterError(
                    f"rocketmq {what} exited; see {self.node_dir(0) / (what + '.out')}"
                )
            if "proxy" not in self.services() and 0 in self.group():
                proxy_starts += 1
                self._start_proxy(progress)
            last = self.health()
            if last["healthy"]:
                return
            time.sleep(0.5)
        raise ClusterError(
            f"rocketmq cluster not healthy after {self.start_timeout_s:.0f} s: {last}; "
            f"logs in {self.workdir}"
        )

    def group(self) -> dict[int, str]:
        """The broker group as the name server lists it: broker id -> address (id 0: the
        DLedger leader); empty when the name server does not answer."""
        try:
            info = admin.cluster_info((self.addr(0), self.ports["namesrv"][0]), ADMIN_TIMEOUT_S)
        except DriverError:
            return {}
        return info.get(rmqconf.GROUP, {})

    def _index_of(self, address: str) -> int | None:
        for i in range(self.nodes):
            if address == f"{self.addr(i)}:{self.ports['broker'][i]}":
                return i
        return None

    def health(self) -> dict[str, Any]:
        """Healthy when the name server lists the group with a leader (broker id 0) and
        every other broker as a follower, each broker answers with its runtime info, every
        follower's commit log is as long as the leader's (in sync), and the proxy listens."""
        group = self.group()
        leader_addr = group.get(0)
        leader = self._index_of(leader_addr) if leader_addr else None
        alive = self.alive()
        nodes = []
        for i in range(self.nodes):
            info: dict[str, str] = {}
            if alive[i]:
                try:
                    info = admin.runtime_info(
                        (self.addr(i), self.ports["broker"][i]), ADMIN_TIMEOUT_S
                    )
                except DriverError:
                    info = {}
            addr = f"{self.addr(i)}:{self.ports['broker'][i]}"
            ids = [b for b, a in group.items() if a == addr]
            nodes.append(
                {
                    "index": i,
                    "alive": alive[i],
                    "port": self.ports["broker"][i],
                    "broker_id": ids[0] if ids else None,
                    "role": "leader" if i == leader else ("follower" if ids else None),
                    "commit_log_max_offset": _int(info.get("commitLogMaxOffset")),
                    "version": info.get("brokerVersionDesc"),
                }
            )
        top = nodes[leader]["commit_log_max_offset"] if leader is not None else None
        for n in nodes:
            n["in_sync"] = top is not None and n["commit_log_max_offset"] == top
        proxy = process.port_open(self.addr(0), self.ports["proxy"][0])
        healthy = (
            leader is not None
            and proxy
            and all(n["alive"] and n["role"] and n["in_sync"] for n in nodes)
        )
        return {
            "healthy": healthy,
            "leader": leader,
            "followers": [n["index"] for n in nodes if n["role"] == "follower"],
            "in_sync": [n["index"] for n in nodes if n["in_sync"]],
            "proxy": proxy,
            "nodes": nodes,
        }

    def leader(self, driver: Any) -> int:
        """The broker that leads the DLedger group (the one group holds every topic)."""
        addr = self.group().get(0)
        index = self._index_of(addr) if addr else None
        if index is None:
            raise ClusterError(f"rocketmq: no DLedger leader registered (master: {addr!r})")
        return index

    def endpoints(self) -> Endpoints:
        """One node per broker; clients reach every one through the proxy's gRPC port."""
        proxy = self.ports["proxy"][0]
        ns = self.ports["namesrv"][0]
        return Endpoints(
            "rocketmq",
            tuple(
                NodeEndpoint(i, self.addr(0), proxy, {"broker": b, "namesrv": ns})
                for i, b in enumerate(self.ports["broker"])
            ),
            {"server": f"RocketMQ {servers.version('rocketmq')}", "stand_in": False},
        )

    def server_versions(self) -> list[str]:
        return [f"RocketMQ {servers.version('rocketmq')} (DLedger broker group, proxy)"]


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


CLUSTER = RocketmqCluster
