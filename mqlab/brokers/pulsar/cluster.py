"""Apache Pulsar on this machine: one ZooKeeper, three bookies, up to three brokers.

Every process is a JVM from the pinned server class path (``servers.toml`` [pulsar],
fetched by ``scripts/bootstrap --test``), each in its own process group with its own
loopback ports and directory under the cluster's work dir:

- ``zookeeper/``: the metadata store, ONE standalone ZooKeeper (128 MiB heap). Pulsar's
  metadata (topic ownership, ledger lists, bookie registrations) lives there; the data
  path (the ledgers) does not. One node, not three: on this 2-core machine shared with
  the clients each JVM costs startup time and memory, and no fault mqlab injects here
  aims at the metadata store (``crash_all`` kills it too and restarts it first).
- ``bookie0..2/``: three BookKeeper bookies (256 MiB heap, 256 MiB direct memory each),
  journal fsynced per entry. Every ledger: ensemble 3, write quorum 3, ack quorum 2
  (``node.LOCAL_REPLICATION``; the driver sets the same on its namespace).
- ``n0..n2/``: the brokers (512 MiB heap, 256 MiB direct each), the cluster's nodes:
  ``kill_node``, ``pause_node`` and ``kill_leader`` (the broker owning the topic) act on
  them; ``kill_bookie``/``restart_bookie`` on a bookie.

Before the brokers and bookies start, ``PulsarClusterMetadataSetup`` registers the
cluster, the ``public/default`` namespace and BookKeeper's ledger layout in ZooKeeper.
Healthy means: every process alive, every broker ready, and a probe message written to a
topic whose current ledger's ensemble is all three bookies (``health``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from mqlab.brokers import servers
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.brokers.pulsar import node as conf
from mqlab.errors import ClusterError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord

LOG = logging.getLogger(__name__)
BOOKIES = 3
HEALTH_TOPIC = "mqlab-health"
HTTP_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 20.0
#: heap and direct memory per process kind (set small: this machine is shared)
MEMORY = {
    "zookeeper": ["-Xmx128m"],
    "bookie": ["-Xmx256m", "-XX:MaxDirectMemorySize=256m"],
    "broker": ["-Xmx512m", "-XX:MaxDirectMemorySize=256m"],
}
MAIN = {
    "zookeeper": "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    "bookie": "org.apache.bookkeeper.server.Main",
    "broker": "org.apache.pulsar.PulsarBrokerStarter",
    "setup": "org.apache.pulsar.PulsarClusterMetadataSetup",
}
#: JVM flags bin/pulsar passes to every Pulsar process (Netty and BookKeeper reflect into
#: java.base; BookKeeper's metadata drivers of Pulsar's metadata store)
JVM_FLAGS = [
    "-Djute.maxbuffer=10485760",
    "-Djava.net.preferIPv4Stack=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/sun.net=ALL-UNNAMED",
    "--add-opens=java.management/sun.management=ALL-UNNAMED",
    "-Dbookkeeper.metadata.bookie.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver",
    "-Dbookkeeper.metadata.client.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver",
    "-Dlog4j.shutdownHookEnabled=false",
]
LOG4J2 = """status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{ISO8601} %-5p [%t] %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
"""
_ENSEMBLE = re.compile(r"ensembles=\{(.*?)\}, ")


def ensembles(metadata: str) -> list[list[str]]:
    """The bookie ensembles of a ledger, from the ``metadata`` text of internalStats
    (``ensembles={0=[a:1, b:2, c:3], 5=[...]}``), in entry order."""
    m = _ENSEMBLE.search(metadata)
    if m is None:
        return []
    return [
        [b.strip() for b in group.split(",") if b.strip()]
        for group in re.findall(r"\[([^\]]*)\]", m.group(1))
    ]


def quorums(metadata: str) -> tuple[int, int, int] | None:
    """(ensemble, write quorum, ack quorum) from a ledger's ``metadata`` text."""
    found = [re.search(rf"{k}=(\d+)", metadata) for k in ("ensembleSize", "writeQuorumSize")]
    ack = re.search(r"ackQuorumSize=(\d+)", metadata)
    if ack is None or any(f is None for f in found):
        return None
    e, w = (int(f.group(1)) for f in found if f is not None)
    return e, w, int(ack.group(1))


def _get(url: str, method: str = "GET") -> str:
    from mqlab.brokers.pulsar.driver import _http

    return _http(method, url)


class PulsarCluster(LocalCluster):
    broker = "pulsar"
    stand_in = None
    runs_on_hosts = False  # this launcher: every process on this machine's loopback
    default_nodes = 3
    start_timeout_s = 300.0  # 7 JVMs on 2 shared cores: 60-120 s measured

    def __init__(
        self, workdir: Any, nodes: int | None = None, hosts: Any = None, server: Any = None
    ):
        if hosts is not None and not all(h.is_local for h in hosts):
            raise ClusterError(
                f"{self.broker}: the local Pulsar launcher runs on this machine only "
                '(set cluster.target = "local"; a lab runs Pulsar from its images)'
            )
        if nodes is not None and not 1 <= nodes <= 3:
            raise ClusterError(f"pulsar: 1 to 3 brokers (over 3 bookies), not {nodes}")
        super().__init__(workdir, nodes, server=server)
        self._side_lock = threading.Lock()

    # -- processes beside the brokers: ZooKeeper and the bookies ------------------------
    def _side(self, name: str) -> ProcessRecord | None:
        rec = self.extra.get("side", {}).get(name)
        return ProcessRecord.from_json(rec) if rec else None

    def _set_side(self, name: str, rec: ProcessRecord | None) -> None:
        side = self.extra.setdefault("side", {})
        if rec is None:
            side.pop(name, None)
        else:
            side[name] = rec.to_json()

    def _java(self, kind: str, args: list[str], log: Path, cwd: Path) -> ProcessRecord:
        (cwd / "tmp").mkdir(parents=True, exist_ok=True)
        cmd = [
            str(servers.java(servers.pin("pulsar").java)),
            *MEMORY.get(kind, ["-Xmx256m"]),
            *JVM_FLAGS,
            # temporary files (RocksDB's native library, Netty's self-signed certificates)
            # go with the node's data, not into /tmp where a killed JVM leaves them
            f"-Djava.io.tmpdir={cwd / 'tmp'}",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            servers.classpath("pulsar"),
            MAIN[kind],
            *args,
        ]
        _p, rec = process.spawn(cmd, log, cwd=cwd)
        return rec

    def _dir(self, name: str) -> Path:
        return self.workdir / name

    @property
    def zk(self) -> str:
        return f"127.0.0.1:{self.ports['zk'][0]}"

    def _start_zookeeper(self) -> None:
        d = self._dir("zookeeper")
        rec = self._java("zookeeper", [str(d / "zookeeper.conf")], d / "zookeeper.log", d)
        self._set_side("zookeeper", rec)

    def _start_bookie(self, j: int) -> None:
        d = self._dir(f"bookie{j}")
        rec = self._java("bookie", ["--conf", str(d / "bookkeeper.conf")], d / "bookie.log", d)
        self._set_side(f"bookie{j}", rec)

    def _wait_port(self, port: int, what: str, deadline: float) -> None:
        while not process.port_open("127.0.0.1", port):
            if time.monotonic() > deadline:
                raise ClusterError(f"pulsar: {what} not listening on {port}")
            time.sleep(0.2)

    def _setup_metadata(self) -> None:
        """``PulsarClusterMetadataSetup``: cluster, public/default, ledger layout."""
        args = conf.local_cluster_metadata_args(self.zk, self.ports["http"], self.ports["broker"])
        d = self._dir("zookeeper")
        cmd = [
            str(servers.java(servers.pin("pulsar").java)),
            "-Xmx256m",
            *JVM_FLAGS,
            f"-Djava.io.tmpdir={d / 'tmp'}",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            servers.classpath("pulsar"),
            MAIN["setup"],
            *args,
        ]
        with (d / "metadata-setup.log").open("ab") as log:
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=180, check=False)
        if r.returncode != 0:
            raise ClusterError(
                f"pulsar: PulsarClusterMetadataSetup failed (exit {r.returncode}); "
                f"see {d / 'metadata-setup.log'}"
            )

    # -- recipe ---------------------------------------------------------------------
    def _prepare(self, progress: Progress) -> None:
        servers.home("pulsar")  # fetched? (else: one line naming the fetch command)
        free = process.free_ports(1 + BOOKIES + 2 * self.nodes)
        self.ports = {
            "zk": free[:1],
            "bookie": free[1 : 1 + BOOKIES],
            "broker": free[1 + BOOKIES : 1 + BOOKIES + self.nodes],
            "http": free[1 + BOOKIES + self.nodes :],
        }
        (self.workdir / "log4j2.properties").write_text(LOG4J2)
        zd = self._dir("zookeeper")
        zd.mkdir(parents=True, exist_ok=True)
        (zd / "zookeeper.conf").write_text(
            conf.local_zookeeper(str(zd / "data"), self.ports["zk"][0])
        )
        for j in range(BOOKIES):
            bd = self._dir(f"bookie{j}")
            bd.mkdir(parents=True, exist_ok=True)
            text = conf.local_bookie(str(bd), self.ports["bookie"][j], self.zk)
            (bd / "bookkeeper.conf").write_text(text)
        for i in range(self.nodes):
            text = conf.local_broker(self.ports["broker"][i], self.ports["http"][i], self.zk)
            self.write(i, "broker.conf", text)

    def _start_all(self, progress: Progress) -> None:
        progress("starting ZooKeeper (Pulsar's metadata store)")
        self._start_zookeeper()
        self.save_state()
        self._wait_port(self.ports["zk"][0], "ZooKeeper", time.monotonic() + 60)
        progress("registering the cluster in ZooKeeper (PulsarClusterMetadataSetup)")
        self._setup_metadata()
        for j in range(BOOKIES):
            progress(f"starting bookie {j}")
            self._start_bookie(j)
        super()._start_all(progress)

    def _start_node(self, index: int) -> ProcessRecord:
        d = Path(str(self.node_dir(index)))
        return self._java("broker", ["--broker-conf", str(d / "broker.conf")], d / "broker.log", d)

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for 3 bookies and the brokers (a replicated probe write)")
        last: Any = "not started"
        while time.monotonic() < deadline:
            dead = [n for n, ok in self._processes_alive().items() if not ok]
            if dead:
                raise ClusterError(
                    f"pulsar: {', '.join(dead)} exited while starting; see the logs under "
                    f"{self.workdir}"
                )
            if all(self._ready(i) for i in range(self.nodes)):
                health = self.health()
                if health["healthy"]:
                    return
                if health.get("probe") != last:
                    LOG.info("pulsar: not healthy yet: %s", health.get("probe"))
                last = health.get("probe")
            time.sleep(1.0)
        raise ClusterError(
            f"pulsar: not healthy after {self.start_timeout_s:.0f} s (last probe: {last})"
        )

    # -- faults -----------------------------------------------------------------------
    def leader(self, driver: Any) -> int:
        """The broker that owns the driver's topic now (the admin API's lookup)."""
        queue = getattr(driver, "queue", HEALTH_TOPIC)
        return self.owner(queue)

    def owner(self, queue: str) -> int:
        last: Exception | None = None
        for base in self.admin_urls:
            try:
                url = f"{base}/lookup/v2/topic/persistent/public/default/{queue}"
                found = json.loads(_get(url))
            except (OSError, ValueError) as e:
                last = e
                continue
            port = int(str(found.get("brokerUrl", "")).rsplit(":", 1)[-1] or 0)
            if port in self.ports["broker"]:
                return int(self.ports["broker"].index(port))
        raise ClusterError(f"pulsar: no broker owns {queue} now ({last})")

    def kill_bookie(self, j: int) -> None:
        """SIGKILL bookie ``j`` (a crash)."""
        rec = self._side(f"bookie{j}")
        if rec is not None:
            process.stop(rec, timeout_s=5, sig=signal.SIGKILL)
        self.save_state()

    def restart_bookie(self, j: int) -> None:
        rec = self._side(f"bookie{j}")
        if rec is None or not process.is_alive(rec):
            self._start_bookie(j)
            self.save_state()

    def crash_all(self) -> None:
        """Every broker, bookie and ZooKeeper SIGKILLed at once."""
        self._own_processes("crash_all")
        side = [r for r in (self._side(n) for n in self._side_names()) if r is not None]
        for rec in side:  # SIGKILL to every group first: all of them at once
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(rec.pgid, signal.SIGKILL)
        super().crash_all()
        for rec in side:
            process.stop(rec, timeout_s=5, sig=signal.SIGKILL)
        self.save_state()

    def restart_node(self, index: int) -> None:
        """Broker ``index`` again; ZooKeeper and the bookies first if they are down
        (after ``crash_all``)."""
        with self._side_lock:
            zk = self._side("zookeeper")
            if zk is None or not process.is_alive(zk):
                self._start_zookeeper()
                self._wait_port(self.ports["zk"][0], "ZooKeeper", time.monotonic() + 60)
            for j in range(BOOKIES):
                self.restart_bookie(j)
        super().restart_node(index)

    def _side_names(self) -> list[str]:
        return [*(f"bookie{j}" for j in range(BOOKIES)), "zookeeper"]

    def _after_stop(self) -> None:
        for name in self._side_names():  # bookies, then the metadata store
            rec = self._side(name)
            if rec is not None:
                process.stop(rec, timeout_s=10)
                self._set_side(name, None)

    def _processes_alive(self) -> dict[str, bool]:
        out = {f"broker{i}": ok for i, ok in enumerate(self.alive())}
        for name in self._side_names():
            rec = self._side(name)
            out[name] = rec is not None and process.is_alive(rec)
        return out

    # -- health -----------------------------------------------------------------------
    @property
    def admin_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports.get("http", [])]

    @property
    def bookie_ids(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports.get("bookie", [])]

    def _ready(self, i: int) -> bool:
        try:
            return _get(f"{self.admin_urls[i]}/admin/v2/brokers/ready").strip() == "ok"
        except OSError:
            return False

    def _probe(self) -> dict[str, Any]:
        """Write one message (sync) to the health topic, then read its current ledger's
        metadata: {"written", "ensemble", "quorums", "error"}."""
        import pulsar

        from mqlab.brokers.pulsar.driver import client_logger, topic_name

        out: dict[str, Any] = {"written": False, "ensemble": [], "quorums": None, "error": ""}
        path = f"/admin/v2/persistent/public/default/{HEALTH_TOPIC}"
        live = [u for i, u in enumerate(self.admin_urls) if self._ready(i)]
        if not live:
            out["error"] = "no broker ready"
            return out
        try:
            _get(live[0] + path, "PUT")
        except urllib.error.HTTPError as e:
            if e.code != 409:  # 409: it exists
                out["error"] = f"create {HEALTH_TOPIC}: {e}"
                return out
        except OSError as e:
            out["error"] = f"create {HEALTH_TOPIC}: {e}"
            return out
        client = pulsar.Client(
            "pulsar://" + ",".join(f"127.0.0.1:{p}" for p in self.ports["broker"]),
            operation_timeout_seconds=int(PROBE_TIMEOUT_S),
            logger=client_logger(),
        )
        try:
            producer = client.create_producer(
                topic_name(HEALTH_TOPIC),
                send_timeout_millis=int(PROBE_TIMEOUT_S * 1000),
                batching_enabled=False,
            )
            producer.send(uuid.uuid4().bytes)
            producer.close()
            out["written"] = True
            stats = json.loads(_get(live[0] + path + "/internalStats?metadata=true"))
            current = stats.get("ledgers", [])[-1:]
            if current:
                meta = str(current[0].get("metadata", ""))
                groups = ensembles(meta)
                out["ensemble"] = sorted(groups[-1]) if groups else []
                out["quorums"] = quorums(meta)
        except Exception as e:  # noqa: BLE001 - any failure means: not serving yet
            out["error"] = f"{type(e).__name__}: {e}"
        finally:
            with contextlib.suppress(Exception):
                client.close()
        return out

    def registered_bookies(self) -> list[str]:
        """The bookies registered in the metadata store (the admin API's list), sorted."""
        for base in self.admin_urls:
            try:
                found = json.loads(_get(f"{base}/admin/v2/bookies/all"))
            except (OSError, ValueError):
                continue
            return sorted(str(b.get("bookieId")) for b in found.get("bookies", []))
        return []

    def health(self) -> dict[str, Any]:
        alive = self._processes_alive()
        ready = [alive[f"broker{i}"] and self._ready(i) for i in range(self.nodes)]
        probe = self._probe() if any(ready) else {"error": "no broker ready"}
        # every bookie serving: listening and registered (a new ledger needs all three)
        serving = {
            b: alive[f"bookie{j}"] and process.port_open("127.0.0.1", self.ports["bookie"][j])
            for j, b in enumerate(self.bookie_ids)
        }
        registered = self.registered_bookies() if any(ready) else []
        replicated = (
            all(serving.values())
            and registered == sorted(self.bookie_ids)
            and probe.get("written") is True
            and probe.get("ensemble") == sorted(self.bookie_ids)
            and probe.get("quorums") == (3, 3, 2)
        )
        return {
            "healthy": all(alive.values()) and all(ready) and replicated,
            "nodes": [
                {"index": i, "alive": alive[f"broker{i}"], "ready": ready[i], "role": "broker"}
                for i in range(self.nodes)
            ],
            "bookies": serving,
            "registered_bookies": registered,
            "zookeeper": alive["zookeeper"],
            "probe": probe,
        }

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "pulsar",
            tuple(NodeEndpoint(i, "127.0.0.1", p) for i, p in enumerate(self.ports["broker"])),
            {
                "server": self.server_versions()[0],
                "stand_in": False,
                "admin_urls": self.admin_urls,
                "bookies": self.bookie_ids,
            },
        )

    def server_versions(self) -> list[str]:
        return [
            f"Apache Pulsar {servers.version('pulsar')} "
            f"({self.nodes} brokers, {BOOKIES} bookies, 1 ZooKeeper)"
        ]


CLUSTER = PulsarCluster
