"""ActiveMQ Artemis, locally: the pinned distribution (``servers.toml``, Maven Central), a
replicated primary, its backup and a spare, with a 3-node ZooKeeper as their lock manager.

Artemis keeps two copies of a message, not three: the primary replicates to exactly one
backup, synchronously (a persistent send is confirmed once the primary's journal has it,
synced, and the backup has it). The third instance is a spare: a backup that finds the
primary already replicated waits, and pairs with whichever server is primary after a
failover.

Split brain: a backup takes over only once it holds the pair's lock in ZooKeeper (Curator,
whose jars ship in Artemis's lib/), which the primary holds while its ZooKeeper session
lives, and only with a journal in sync (the activation sequence ZooKeeper keeps). A
3-node ensemble keeps that decision when one ZooKeeper node goes. With two brokers only,
Artemis's own quorum vote needs other live servers to vote, and the file lock means one
host; hence ZooKeeper.

Files per instance (``<workdir>/n<i>``): ``bin/artemis create`` makes the instance (no web
console, 512 MiB heap), then mqlab writes its ``etc/broker.xml``
(``mqlab.brokers.artemis.node.render`` with the lock manager): one acceptor on a free
127.0.0.1 port (every protocol; the driver speaks STOMP), static cluster connectors to the
other two, the journal synced per persistent send. ZooKeeper node ``k`` lives in
``<workdir>/zk<k>`` (``zoo.cfg``, ``myid``, 128 MiB heap, its admin server off).

Healthy means (``health``): the three ZooKeeper nodes answer ``srvr`` with one leader;
exactly one Artemis instance serves clients (a backup opens no acceptor) and it says, over
its management address, that it is not a backup and that its replica is in sync
(``replicaSync``), and its network topology names a backup beside it; a probe message sent
with a receipt comes back; the other two instances run. Roles: ``primary``, ``backup``
(the one the topology names) and ``spare``.

After a failover (measured here: the primary SIGKILLed, the backup served ~8 s later, the
ZooKeeper session of 6 s included, and the spare was its in-sync backup ~1 s after that),
the old primary restarted does not serve its stale journal: it finds the lock held, moves
its journal aside (``oldreplica.N``) and waits as a backup.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from mqlab.brokers import servers
from mqlab.brokers.artemis import node as artemis_node
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.errors import ClusterError, DriverError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord

ARTEMIS_HEAP = "512M"
ZK_HEAP = "-Xmx128m"
ZK_TICK_MS = 500
SESSION_MS = 6000  # a dead primary's lock goes with its ZooKeeper session: the failover time
PROBE_QUEUE = "mqlab-health"
PROBE_TIMEOUT_S = 10.0
JAVA_ARGS = (
    f"-Xms128M -Xmx{ARTEMIS_HEAP} -XX:+UseSerialGC -XX:MaxDirectMemorySize=256M "
    "-Dlog4j2.disableJmx=true --add-opens java.base/jdk.internal.misc=ALL-UNNAMED"
)


#: each instance runs under a shell that starts it again when it stops by itself. With a
#: lock manager Artemis expects such a supervisor: a broker that loses its lock, or a backup
#: whose registration with the primary fails ("Stopping broker because of critical
#: registration error", seen here when a spare's request waited 30 s on a loaded machine),
#: stops its JVM. SIGTERM/SIGKILL to the process group end both the shell and the JVM.
SUPERVISE = (
    'while :; do "$1" run; echo "mqlab: artemis exited ($?); starting it again in 1 s"; '
    "sleep 1; done"
)


def zoo_cfg(k: int, zk_dir: Path, ports: dict[str, list[int]]) -> str:
    peers = "".join(
        f"server.{n + 1}=127.0.0.1:{ports['zk_peer'][n]}:{ports['zk_election'][n]}\n"
        for n in range(len(ports["zk"]))
    )
    return (
        f"tickTime={ZK_TICK_MS}\ninitLimit=20\nsyncLimit=10\n"
        f"dataDir={zk_dir / 'data'}\nclientPort={ports['zk'][k]}\n"
        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=srvr,ruok\nmaxSessionTimeout=60000\n" + peers
    )


def zk_mode(port: int) -> str:
    """What ZooKeeper's ``srvr`` command says of the node's role ("" if no answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"srvr")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError:
        return ""
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return ""


class ArtemisCluster(LocalCluster):
    broker = "artemis"
    start_timeout_s = 150.0
    runs_on_hosts = False  # on a lab whose images run the brokers: mqlab.brokers.image

    def __init__(
        self, workdir: Any, nodes: int | None = None, hosts: Any = None, server: Any = None
    ):
        if hosts is not None and not all(h.is_local for h in hosts):
            raise ClusterError(
                f"{self.broker}: the local Artemis cluster runs on this machine only "
                '(set cluster.target = "local")'
            )
        super().__init__(workdir, nodes, server=server)
        self.zk: dict[int, ProcessRecord] = {}

    # -- files --------------------------------------------------------------------------
    def path(self, index: int) -> Path:
        return Path(str(self.node_dir(index)))

    def zk_dir(self, k: int) -> Path:
        return self.workdir / f"zk{k}"

    def log(self, index: int) -> Path:
        return self.path(index) / "artemis.log"

    @property
    def connect_string(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports["zk"])

    def _java_env(self) -> dict[str, str]:
        java = servers.java(servers.pin("artemis").java)
        return {
            **os.environ,
            "JAVA_HOME": str(java.parent.parent),
            "JAVA_ARGS": JAVA_ARGS,
        }

    def _prepare(self, progress: Progress) -> None:
        home = servers.dist("artemis")
        servers.classpath("zookeeper")  # fetched (else: the command that fetches it)
        free = process.free_ports(5 * self.nodes)
        n = self.nodes
        self.ports = {
            "core": free[:n],
            "zk": free[n : 2 * n],
            "zk_peer": free[2 * n : 3 * n],
            "zk_election": free[3 * n : 4 * n],
            "cluster": free[4 * n :],  # the acceptor of cluster and replication traffic
        }
        for k in range(self.nodes):
            d = self.zk_dir(k)
            (d / "data").mkdir(parents=True, exist_ok=True)
            (d / "data" / "myid").write_text(f"{k + 1}\n")
            (d / "zoo.cfg").write_text(zoo_cfg(k, d, self.ports))
        progress(f"creating {self.nodes} Artemis instances (bin/artemis create)")
        env = self._java_env()
        creates = []
        for i in range(self.nodes):
            cmd = [
                str(home / "bin" / "artemis"),
                "create",
                str(self.path(i)),
                "--silent",
                "--force",
                "--host",
                "127.0.0.1",
                "--port-offset",
                str(i),
                "--replicated",
                *(["--backup"] if i else []),
                "--staticCluster",
                ",".join(f"tcp://127.0.0.1:{p}" for p in self.ports["core"]),
                "--no-web",
                "--no-autotune",
                "--java-memory",
                ARTEMIS_HEAP,
                "--user",
                "mqlab",
                "--password",
                "mqlab",
                "--allow-anonymous",
            ]
            log = self.path(i).parent / f"create-{i}.log"
            proc, _rec = process.spawn(cmd, log, env=env, cwd=self.workdir)
            creates.append((i, proc, log))
        for i, proc, log in creates:
            if proc.wait(timeout=120) != 0:
                raise ClusterError(f"artemis create of instance {i} failed; see {log}")
        for i in range(self.nodes):
            conf = artemis_node.render(
                self.node_conf(i, str(self.path(i) / "data")),
                lock_manager=self.connect_string,
                session_ms=SESSION_MS,
            )
            self.write(i, "etc/broker.xml", conf["broker.xml"])

    # -- processes ------------------------------------------------------------------
    def _start_zk(self, k: int) -> ProcessRecord:
        d = self.zk_dir(k)
        java = servers.java(servers.pin("zookeeper").java)
        cmd = [
            str(java),
            ZK_HEAP,
            "-XX:+UseSerialGC",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            servers.classpath("zookeeper"),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(d / "zoo.cfg"),
        ]
        _p, rec = process.spawn(cmd, d / "zookeeper.log", cwd=d)
        return rec

    def _start_node(self, index: int) -> ProcessRecord:
        d = self.path(index)
        _p, rec = process.spawn(
            ["sh", "-c", SUPERVISE, "artemis", str(d / "bin" / "artemis")],
            self.log(index),
            env=self._java_env(),
            cwd=d,
        )
        return rec

    def _start_all(self, progress: Progress) -> None:
        """ZooKeeper first; then the primary, once it serves its backups."""
        progress(f"starting a {self.nodes}-node ZooKeeper (Artemis's lock manager)")
        for k in range(self.nodes):
            self.zk[k] = self._start_zk(k)
        self.save_state()
        deadline = time.monotonic() + self.start_timeout_s
        while self.zk_leader() is None:
            self._check_alive()
            if time.monotonic() > deadline:
                raise ClusterError(f"ZooKeeper has no leader; see {self.workdir}/zk*/zookeeper.log")
            time.sleep(0.2)
        progress("starting Artemis instance 0 (the primary)")
        self.procs[0] = self._start_node(0)
        self.save_state()
        while not self.serving():
            self._check_alive()
            if time.monotonic() > deadline:
                raise ClusterError(f"Artemis primary not serving; see {self.log(0)}")
            time.sleep(0.2)
        for i in range(1, self.nodes):
            progress(f"starting Artemis instance {i} (a backup)")
            self.procs[i] = self._start_node(i)

    def _check_alive(self) -> None:
        for k, rec in self.zk.items():
            if not process.is_alive(rec):
                raise ClusterError(f"ZooKeeper node {k} exited; see {self.zk_dir(k)}/zookeeper.log")
        for i, alive in enumerate(self.alive()):
            if i in self.procs and not alive:
                raise ClusterError(f"Artemis instance {i} exited; see {self.log(i)}")

    def _after_stop(self) -> None:
        for rec in self.zk.values():
            process.stop(rec)
        self.zk = {}

    def _save_state(self) -> None:
        self.extra["zk"] = {str(k): r.to_json() for k, r in self.zk.items()}
        super()._save_state()

    @classmethod
    def load(cls, workdir: Path) -> LocalCluster:
        obj = super().load(workdir)
        assert isinstance(obj, ArtemisCluster)
        obj.zk = {int(k): ProcessRecord.from_json(r) for k, r in obj.extra.get("zk", {}).items()}
        return obj

    # -- health ---------------------------------------------------------------------
    def zk_leader(self) -> int | None:
        modes = [zk_mode(p) for p in self.ports["zk"]]
        leaders = [k for k, m in enumerate(modes) if m == "leader"]
        if len(leaders) == 1 and all(m in ("leader", "follower") for m in modes):
            return leaders[0]
        return None

    def serving(self) -> list[int]:
        """The instances that accept connections (the primary; a backup opens no acceptor)."""
        alive = self.alive()
        return [
            i
            for i in range(self.nodes)
            if alive[i] and process.port_open("127.0.0.1", self.ports["core"][i])
        ]

    def _driver(self, index: int, queue: str = PROBE_QUEUE) -> Any:
        from mqlab.brokers.artemis.driver import ArtemisDriver, Settings

        s = Settings(
            receipt_timeout_s=PROBE_TIMEOUT_S, heartbeat_s=0.0, prefetch=1, connect_timeout_s=2.0
        )
        ep = Endpoints("artemis", (NodeEndpoint(index, "127.0.0.1", self.ports["core"][index]),))
        return ArtemisDriver(s, ep, queue)

    def replication(self, index: int) -> dict[str, Any]:
        """What instance ``index`` says of itself over its management address: whether it
        is a backup, whether its replica is in sync, and the pairs of its topology."""
        return dict(self._driver(index).replication())

    def probe(self, index: int) -> tuple[bool, str]:
        """A message sent to instance ``index`` with a receipt, read back and acked."""
        from mqlab.brokers.artemis.probe import probe

        try:
            return probe(self._driver(index), uuid.uuid4().hex)
        except DriverError as e:
            return False, str(e)

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for the primary to replicate to an in-sync backup")
        last: Any = "not started"
        while time.monotonic() < deadline:
            self._check_alive()
            health = self.health()
            if health["healthy"]:
                return
            last = health
            time.sleep(0.5)
        raise ClusterError(
            f"Artemis not healthy after {self.start_timeout_s:.0f} s: {last}; "
            f"logs in {self.workdir}"
        )

    def health(self) -> dict[str, Any]:
        alive = self.alive()
        zk_alive = [process.is_alive(self.zk[k]) if k in self.zk else False for k in range(3)]
        serving = self.serving()
        primary = serving[0] if len(serving) == 1 else None
        repl: dict[str, Any] = {}
        why = f"serving: {serving}"
        if primary is not None:
            try:
                repl = self.replication(primary)
                why = "ok"
            except DriverError as e:
                why = str(e)
        in_sync = bool(repl) and not repl["backup"] and repl["replica_sync"]
        # the primary's own pair names a backup (the spare pairs only after a failover)
        paired = any(p.get("backup") for p in repl.get("topology", []))
        ok = primary is not None and in_sync and paired
        probe = self.probe(primary) if ok and primary is not None else (False, "not probed")
        backups = {p.get("backup") for p in repl.get("topology", [])}
        roles = [
            "down"
            if not alive[i]
            else "primary"
            if i == primary
            else "backup"
            if f"127.0.0.1:{self.ports['cluster'][i]}" in backups
            else "spare"
            for i in range(self.nodes)
        ]
        return {
            "healthy": bool(in_sync and paired and probe[0] and all(alive) and all(zk_alive))
            and self.zk_leader() is not None,
            "primary": primary,
            "replica_sync": repl.get("replica_sync"),
            "topology": repl.get("topology"),
            "why": why if why != "ok" else probe[1],
            "zookeeper": {"alive": zk_alive, "leader": self.zk_leader()},
            "nodes": [
                {"index": i, "alive": alive[i], "role": roles[i], "port": self.ports["core"][i]}
                for i in range(self.nodes)
            ],
        }

    def leader(self, driver: Any) -> int:
        """The instance that serves (the primary now)."""
        serving = self.serving()
        if len(serving) != 1:
            raise ClusterError(f"no single Artemis primary serves (serving: {serving})")
        return serving[0]

    # -- clients --------------------------------------------------------------------
    def endpoints(self) -> Endpoints:
        return Endpoints(
            "artemis",
            tuple(NodeEndpoint(i, "127.0.0.1", self.ports["core"][i]) for i in range(self.nodes)),
            {"server": self.server_versions()[0], "stand_in": False},
        )

    def server_versions(self) -> list[str]:
        return [
            f"ActiveMQ Artemis {servers.version('artemis')} (replicated primary, backup and "
            f"spare; ZooKeeper {servers.version('zookeeper')} lock manager)"
        ]


CLUSTER = ArtemisCluster
