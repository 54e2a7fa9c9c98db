"""Apache Kafka in KRaft mode: 3 combined broker+controller JVMs from Maven Central.

The server is the pinned ``kafka`` of ``mqlab.brokers.servers`` (its ``lib/`` is the
class path; Java 17). Locally every node runs on 127.0.0.1 with free ``kafka`` and
``controller`` ports; node ``i`` has ``node.id`` ``i`` and votes in the static
controller quorum. ``mqlab.brokers.kafka.node`` renders each node's
``server.properties`` (replication factor 3 for every topic and internal topic,
``min.insync.replicas`` 2, no unclean leader election, no group-join delay) and
``log4j2.properties`` (the Maven artifacts carry no log configuration: without one
the broker says nothing). Each node's storage is formatted with the cluster id
(``kafka.tools.StorageTool format``) before its first start; a restarted node keeps
its data. Heaps are fixed (``HEAP``) so three nodes stay near 3 GiB resident.

Health means: every node registered with the controllers, and a probe topic with one
partition on every node whose in-sync replicas are all of them (replication proven,
not just open ports). On a lab whose images run Kafka the attach path
(``mqlab.brokers.image``) checks the nodes instead, as before.
"""

from __future__ import annotations

import signal
import time
from pathlib import PurePosixPath
from typing import Any

from mqlab.brokers import nodeconf, servers
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.errors import ClusterError
from mqlab.hosts.process import ProcessRecord

PROBE_TOPIC = "mqlab-health-probe"
#: the JVM's memory and GC: a fixed 512 MiB heap, small direct memory, few GC threads
#: (the nodes share 2 cores with the clients); a node that runs out of memory exits
HEAP = [
    "-Xms512m",
    "-Xmx512m",
    "-XX:MaxDirectMemorySize=256m",
    "-XX:MaxMetaspaceSize=192m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:ParallelGCThreads=2",
    "-XX:ConcGCThreads=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]

#: a short-lived tool's JVM (the storage format)
TOOL_HEAP = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    # log_level 0: the nodes not up yet are expected while starting, not worth a line each
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000, "log_level": 0})


class KafkaCluster(LocalCluster):
    broker = "kafka"
    # on a lab whose images run Kafka, the attach path checks them (mqlab.brokers.image)
    runs_on_hosts = False
    follows_advertised = True
    start_timeout_s = 120.0

    # -- where things are ------------------------------------------------------------
    def java(self) -> str:
        return str(servers.java(servers.pin("kafka").java))

    def jvm(self, index: int, main: list[str], heap: list[str] = HEAP) -> list[str]:
        """A JVM of node ``index`` running ``main`` on the server's class path."""
        d = self.node_dir(index)
        return [
            self.java(),
            *heap,
            f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={d / 'logs'}",
            "-cp",
            servers.classpath("kafka"),
            *main,
        ]

    # -- recipe ----------------------------------------------------------------------
    def _prepare(self, progress: Progress) -> None:
        servers.home("kafka")  # one line naming the fetch command when it is missing
        self.ports = self.pick_ports(["kafka", "controller"])
        for i in range(self.nodes):
            d = self.node_dir(i)
            files = nodeconf.render(self.node_conf(i, d / "data"))
            for name, text in files.items():
                self.write(i, name, text)
            self.hosts[i].mkdir(d / "logs")
        progress(f"formatting the storage of {self.nodes} kafka nodes")
        self._each(list(range(self.nodes)), self._format)

    def _format(self, index: int) -> None:
        d = self.node_dir(index)
        cluster_id = nodeconf.kafka_cluster_id(self.workdir.name)
        cmd = self.jvm(index, ["kafka.tools.StorageTool", "format"], TOOL_HEAP)
        cmd += ["-t", cluster_id, "-c", str(d / "server.properties"), "--ignore-formatted"]
        res = self.host(index).run(cmd, timeout_s=120, check=False)
        if res.rc != 0:
            raise ClusterError(
                f"kafka node {index}: storage format failed: {(res.out + res.err).strip()[-400:]}"
            )

    def _start_node(self, index: int) -> ProcessRecord:
        d = self.node_dir(index)
        cmd = self.jvm(index, ["kafka.Kafka", str(d / "server.properties")])
        return self.host(index).spawn(cmd, d / "logs" / "stdout.log", cwd=d)

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for every kafka node to register, then a probe topic in sync")
        while time.monotonic() < deadline:
            for i, ok in enumerate(self.alive()):
                if not ok:
                    raise ClusterError(
                        f"kafka node {i} exited; see {self.node_dir(i) / 'logs'} "
                        f"on {self.host(i).name}"
                    )
            if len(self._brokers()) == self.nodes and self._ensure_probe():
                health = self.health()
                if health["healthy"]:
                    return
            time.sleep(0.5)
        raise ClusterError(
            f"Kafka cluster not healthy after {self.start_timeout_s:.0f} s: {self.health()}; "
            f"logs in {self.workdir}/n*/logs"
        )

    def stop(self, remove_data: bool = True) -> None:
        """Every node told to stop at once: one by one, the last ones would wait for a
        controller quorum that is already gone before giving up their controlled shutdown
        (tens of seconds here). With its data removed a node has nothing to shut down
        cleanly: it is SIGKILLed, so ``cluster down`` and the tests' teardown take no time."""
        if not self.attached and self.procs:
            stop = self._kill_node_now if remove_data else self._stop_node
            self._each(sorted(self.procs), stop)
        super().stop(remove_data)

    def _stop_node(self, index: int) -> None:
        self.hosts[index].stop(self.procs[index], timeout_s=30)

    def _kill_node_now(self, index: int) -> None:
        self.hosts[index].stop(self.procs[index], timeout_s=5, sig=signal.SIGKILL)

    # -- state -----------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(
            "{}:{}".format(*self.reach(self.addr(i), self.ports["kafka"][i]))
            for i in range(self.nodes)
        )

    def _brokers(self) -> set[int]:
        """The node ids the cluster's metadata lists (registered, unfenced brokers)."""
        try:
            md = _admin(self.bootstrap).list_topics(timeout=3)
        except Exception:
            return set()
        return set(md.brokers)

    def _ensure_probe(self) -> bool:
        """The probe topic exists (created once: one partition on every node)."""
        from confluent_kafka.admin import NewTopic

        admin = _admin(self.bootstrap)
        try:
            if PROBE_TOPIC in admin.list_topics(timeout=3).topics:
                return True
            topic = NewTopic(
                PROBE_TOPIC,
                num_partitions=1,
                replication_factor=self.nodes,
                config={"min.insync.replicas": str(min(2, self.nodes))},
            )
            admin.create_topics([topic])[PROBE_TOPIC].result(10)
            return True
        except Exception:
            return False

    def partitions(self, topic: str) -> dict[int, dict[str, Any]]:
        """Per partition of ``topic``: its leader's node id, replicas and in-sync replicas
        (the cluster's metadata); {} when the topic or the metadata cannot be read."""
        try:
            md = _admin(self.bootstrap).list_topics(topic, timeout=3)
        except Exception:
            return {}
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return {}
        return {
            p.id: {"leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
            for p in t.partitions.values()
        }

    def health(self) -> dict[str, Any]:
        alive = self.alive()
        registered = self._brokers() if any(alive) else set()
        probe = self.partitions(PROBE_TOPIC).get(0, {})
        isr = sorted(probe.get("isr", []))
        nodes = [
            {
                "index": i,
                "alive": alive[i],
                "port": self.ports["kafka"][i],
                "registered": i in registered,
                "in_sync": i in isr,
            }
            for i in range(self.nodes)
        ]
        healthy = all(n["alive"] and n["registered"] and n["in_sync"] for n in nodes)
        return {
            "healthy": healthy,
            "probe": {"topic": PROBE_TOPIC, "leader": probe.get("leader"), "isr": isr},
            "nodes": nodes,
        }

    def leader(self, driver: Any) -> int:
        """The node leading partition 0 of the driver's topic (node ids are indexes)."""
        lead = self.partitions(driver.topic).get(0, {}).get("leader", -1)
        if not 0 <= lead < self.nodes:
            raise ClusterError(f"kafka: no leader of {driver.topic} partition 0 (got {lead})")
        return int(lead)

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "kafka",
            tuple(NodeEndpoint(i, self.addr(i), p) for i, p in enumerate(self.ports["kafka"])),
            {"server": self.server_versions()[0], "stand_in": False},
        )

    def server_versions(self) -> list[str]:
        return [f"Apache Kafka {servers.version('kafka')}"]

    def data_dir(self, index: int) -> PurePosixPath:
        return self.node_dir(index) / "data"


CLUSTER = KafkaCluster
