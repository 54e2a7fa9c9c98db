"""Apache RocketMQ 5 from Maven Central (``servers.toml``'s ``rocketmq``), on this machine
or on a lab's hosts: one broker group of 3 brokers, the name server(s), and one gRPC proxy
in cluster mode, which is what the Python gRPC client speaks to. The profile chooses the
layout (``layout.py``, ``server_config``):

- DLedger (the default, ``replication = "quorum"``): the group's commit log is one DLedger
  (Raft) group, one name server beside node 0. Raft elects the leader inside the group (no
  controller to run), and a send is answered SEND_OK only once a majority (2 of 3)
  appended the message: synchronous replication to a quorum, whichever broker leads.
  DLedger flushes its log on its own timer (every 10 ms), not per message.
- controller mode (``"all_in_sync"``, ``"async"``): every node runs a name server that
  embeds one of 3 controllers; the controllers elect the master among the group's
  SyncStateSet; the profile says what a send waits for and whether the master flushes
  before it answers.

Either way the master alone takes writes and registers as broker id 0, where clients find
it. Node ``i`` is broker ``i`` (``kill_node``, ``pause_node`` act on it). The name servers
and the proxy are services of the cluster (stopped with it; a fault on a node leaves them
running, a partition cuts them off with their host). JVM sizes are small (``HEAP``,
``DIRECT``) and the commit log's files 64 MiB, not the 8 GiB heap, 15 GiB direct memory
and 1 GiB files of RocketMQ's own scripts. On a netns lab's hosts the nodes use
RocketMQ's standard ports; on an AWS lab the images run RocketMQ themselves (``node.py``, DLedger).
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
from mqlab.brokers.rocketmq import admin, layout
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
    """Node ``index``'s broker.conf, sized for this machine: node.py's DLedger settings, or
    with a profile's controller-mode layout (``layout.py``) node.py's broker without
    DLedger, in controller mode, its HA port beside its listen port."""
    files = rmqconf.render(c.node_conf(index, c.node_dir(index) / "store"))
    conf: dict[str, Any] = {}
    for line in files["broker.conf"].splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            conf[k.strip()] = v.strip()
    if layout.controller_mode(c.server):
        for k in ("enableDLegerCommitLog", "dLegerGroup", "dLegerPeers", "dLegerSelfId"):
            conf.pop(k, None)
        conf |= {
            "controllerAddr": c.controller_addr(),
            "haListenPort": c.ports["broker"][index] + 1,  # broker_ports() keeps it free
        }
        return conf | _sized(c) | layout.broker_settings(c.server)
    return conf | _sized(c)


def _sized(c: RocketmqCluster) -> dict[str, Any]:
    return {
        "namesrvAddr": c.namesrv_addr(),
        "mappedFileSizeCommitLog": COMMIT_LOG_FILE,
        "mappedFileSizeTimerLog": 16 * 1024 * 1024,
        "diskMaxUsedSpaceRatio": 95,
        "autoCreateTopicEnable": False,
        "flushDiskType": "ASYNC_FLUSH",
        "sendMessageThreadPoolNums": 4,
    }


class RocketmqCluster(LocalCluster):
    broker = "rocketmq"
    start_timeout_s = 240.0  # 90 s here with the machine's 2 cores busy
    # an AWS lab's images run RocketMQ (node.py): the attach path checks them there; a
    # netns lab's hosts (this machine's files: the same JDK and jars) get their nodes from
    # this launcher all the same
    runs_on_hosts = False

    # -- configuration ---------------------------------------------------------------
    @classmethod
    def server_config(cls, settings: Any) -> dict[str, Any]:
        """The broker layout the profile asks for (``layout.server_config``)."""
        server = getattr(settings, "server", None)
        return server() if callable(server) else {}

    def namesrv_nodes(self) -> list[int]:
        """The nodes that run a name server: node 0 beside the DLedger group; every node in
        controller mode, each name server embedding one controller of a 3-peer controller
        group (a majority elects the group's master, as the brokers' own quorum would: a
        node cut off alone takes neither the controllers' majority nor the routing along)."""
        return list(range(self.nodes)) if layout.controller_mode(self.server) else [0]

    def namesrv_addr(self) -> str:
        return ";".join(f"{self.addr(i)}:{self.ports['namesrv'][i]}" for i in self.namesrv_nodes())

    def controller_addr(self) -> str:
        """Every controller, on its DLedger peer's port: the controller serves its requests
        there, not on the name server's port (asked there, the name server answers that
        request 1005 is not supported: tried here)."""
        return ";".join(f"{a}:{p}" for a, p in self.controllers())

    def controllers(self) -> list[tuple[str, int]]:
        return [(self.addr(i), self.ports["controller"][i]) for i in self.namesrv_nodes()]

    def layout(self) -> str:
        if layout.controller_mode(self.server):
            flush = "SYNC_FLUSH" if self.server["flush"] == "sync" else "ASYNC_FLUSH"
            acks = (
                "every in-sync replica"
                if self.server["replication"] == "all_in_sync"
                else "the master alone"
            )
            return f"controller mode, a send answered once {acks} has it, {flush}"
        return "DLedger broker group"

    def _prepare(self, progress: Progress) -> None:
        self.home = servers.home("rocketmq")  # raises the one-line fetch hint when missing
        names = ["dledger", "namesrv", "proxy", "proxy_remoting"]
        if self.on_hosts:  # a host each (a lab): RocketMQ's standard ports
            self.ports = self.pick_ports(["broker", *names])
            self.ports["controller"] = [layout.CONTROLLER_PORT] * self.nodes
        else:  # one machine: each broker's neighbouring ports free too
            picked = self.pick_ports([*names, "controller"])
            self.ports = {"broker": broker_ports(self.nodes), **picked}
        for i in range(self.nodes):
            self.hosts[i].mkdir(self.node_dir(i) / "store")
            self.write(i, "broker.conf", lines(props(broker_conf(self, i))))
        peers = [f"{a}:{p}" for a, p in self.controllers()]
        for i in self.namesrv_nodes():
            namesrv: dict[str, Any] = {"listenPort": self.ports["namesrv"][i]}
            if layout.controller_mode(self.server):
                store = str(self.node_dir(i) / "controller")
                namesrv |= layout.namesrv_settings(peers, i, store)
            self.write(i, "namesrv.conf", lines(props(namesrv)))
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

    def _start_service(self, what: str, args: list[str], index: int = 0) -> None:
        """A service of the cluster (a name server, the proxy) on node ``index``'s host,
        kept as ``what`` (node 0) or ``what@index``."""
        rec = self._java(index, what, jvm(SERVICE_HEAP[what], "128m"), args)
        key = what if index == 0 else f"{what}@{index}"
        self.extra.setdefault("services", {})[key] = rec.to_json()

    def _start_all(self, progress: Progress) -> None:
        for i in self.namesrv_nodes():
            progress(f"starting the rocketmq name server on node {i}")
            self._start_service("namesrv", ["-c", str(self.node_dir(i) / "namesrv.conf")], i)
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
        """The proxy, then the name servers at once, each on its host."""
        services = self.services()
        proxy = services.pop("proxy", None)
        if proxy is not None:
            self.hosts[0].stop(proxy, timeout_s=STOP_S)
        keys = list(services)
        self._each(
            list(range(len(keys))),
            lambda k: self.hosts[_service_node(keys[k])].stop(services[keys[k]], timeout_s=STOP_S),
        )
        self.extra.pop("services", None)

    # -- health ----------------------------------------------------------------------
    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress(f"waiting for the group's master ({self.layout()}), its replicas and the proxy")
        last: dict[str, Any] = {}
        proxy_starts = 0
        while time.monotonic() < deadline:
            for i, ok in enumerate(self.alive()):
                if not ok:
                    raise ClusterError(
                        f"rocketmq broker {i} exited; see {self.node_dir(i) / 'broker.out'} "
                        f"and {self.node_dir(i) / 'logs'}"
                    )
            for key, rec in self.services().items():
                node = _service_node(key)
                if self.hosts[node].is_alive(rec):
                    continue
                if key == "proxy" and proxy_starts < PROXY_STARTS:
                    self.extra["services"].pop("proxy")  # started again below
                    continue
                what = key.split("@")[0]
                raise ClusterError(
                    f"rocketmq {what} on node {node} exited; "
                    f"see {self.node_dir(node) / (what + '.out')}"
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
        """The broker group as the first name server that answers lists it: broker id ->
        address (id 0: the master); empty when none answers."""
        for i in self.namesrv_nodes():
            try:
                info = admin.cluster_info((self.addr(i), self.ports["namesrv"][i]), ADMIN_TIMEOUT_S)
            except DriverError:
                continue
            return info.get(rmqconf.GROUP, {})
        return {}

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
        out = {
            "healthy": healthy,
            "leader": leader,
            "followers": [n["index"] for n in nodes if n["role"] == "follower"],
            "in_sync": [n["index"] for n in nodes if n["in_sync"]],
            "proxy": proxy,
            "nodes": nodes,
        }
        if layout.controller_mode(self.server):
            # the controller's own view: its master is the name server's, and every broker
            # is in the group's SyncStateSet (a replica that has caught up), alive
            sync = self.sync_state_set()
            out["sync_state_set"] = sync
            out["healthy"] = healthy and sync == list(range(self.nodes))
        return out

    def sync_state_set(self) -> list[int] | None:
        """Controller mode: the brokers of the group's SyncStateSet, alive, as the
        controller lists them (the master among them); None when it does not answer or
        names a master other than the name server's broker id 0."""
        state = None
        for controller in self.controllers():  # the leading controller answers
            try:
                state = admin.sync_state(controller, rmqconf.GROUP, ADMIN_TIMEOUT_S)
                break
            except DriverError:
                continue
        if state is None or state["master"] != self.group().get(0):
            return None
        found = [self._index_of(r["address"]) for r in state["in_sync"] if r["alive"]]
        return sorted(i for i in found if i is not None)

    def leader(self, driver: Any) -> int:
        """The group's master: the DLedger leader or the controllers' choice (the one group
        holds every topic)."""
        addr = self.group().get(0)
        index = self._index_of(addr) if addr else None
        if index is None:
            raise ClusterError(f"rocketmq: no DLedger leader registered (master: {addr!r})")
        return index

    def endpoints(self) -> Endpoints:
        """One node per broker; clients reach every one through the proxy's gRPC port."""
        proxy = self.ports["proxy"][0]
        names = self.namesrv_nodes()
        nodes = []
        for i, b in enumerate(self.ports["broker"]):
            n = names[i % len(names)]  # a name server each where every node runs one
            extra = {"broker": b, "broker_host": self.addr(i)}
            extra |= {"namesrv": self.ports["namesrv"][n], "namesrv_host": self.addr(n)}
            nodes.append(NodeEndpoint(i, self.addr(0), proxy, extra))
        return Endpoints(
            "rocketmq",
            tuple(nodes),
            {"server": f"RocketMQ {servers.version('rocketmq')}", "stand_in": False},
        )

    def server_versions(self) -> list[str]:
        return [f"RocketMQ {servers.version('rocketmq')} ({self.layout()}, proxy)"]


def _service_node(key: str) -> int:
    """The node a service runs beside (``what`` on node 0, ``what@index``)."""
    return int(key.split("@")[1]) if "@" in key else 0


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


CLUSTER = RocketmqCluster
