"""ActiveMQ Artemis, locally: Debian's ActiveMQ 5.17 (package ``activemq``) as a stand-in.

No Artemis can be obtained on these machines. The Artemis driver speaks STOMP, and so does
ActiveMQ 5, which Debian packages. The stand-in is therefore 3 ActiveMQ 5 brokers in
shared-store master/slave on one KahaDB directory (``<workdir>/shared/kahadb``). The first
broker to lock the store serves; the others wait for the lock, trying every 0.5 s. When
the master dies, one of them takes the lock, replays the journal and serves. That is one
copy of the data on one disk. It is not Artemis's replication, and its figures are never
Artemis's (``stand_in``).

Each node is one JVM (``java -jar /usr/share/activemq/bin/activemq.jar start
xbean:file:...``, heap ``-Xmx256m``) in a process group of its own. It has its own
``activemq.xml``, ``conf/log4j.properties``, data directory (temporary storage) and log
(``activemq.log``) under its node directory. Its only connector is STOMP, on a free
127.0.0.1 port. There is no JMX (``useJmx="false"``, no RMI port) and no web console:
Debian's package ships neither Jetty nor Jolokia. Node 0 starts first and so becomes the
master; nodes 1 and 2 start once it serves. XStream (Debian ``libxstream-java``) goes on
each node's class path (``lib/extra``): the statistics plugin's map replies, which the
driver's ``remaining()`` reads, need it for STOMP's ``jms-map-xml`` form.

Healthy means: exactly one node serves STOMP, and a probe sent to it with a receipt is
read back and acked; every other node runs and, since its latest start, has logged that it
waits for the store's lock (a waiting slave opens no connector, and there is no JMX to
ask).
``leader()`` is the serving node. The endpoints list all three nodes: the driver's
connections try them in turn (its failover list).
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.errors import ClusterError, DriverError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord

ACTIVEMQ_HOME = Path("/usr/share/activemq")
ACTIVEMQ_JAR = ACTIVEMQ_HOME / "bin" / "activemq.jar"
XSTREAM_JAR = Path("/usr/share/java/xstream.jar")
FIX = "install the Debian packages: scripts/apt-packages.txt (activemq, libxstream-java)"
HEAP = "-Xmx256m"
LOCK_RETRY_MS = 500  # a waiting slave tries the store's lock this often
PROBE_QUEUE = "mqlab-health"
# what ActiveMQ 5 logs at each start, and once it waits for the store's lock
START_LINE = "Loading message broker from"
SLAVE_LINE = "This broker is now in slave mode"
PROBE_TIMEOUT_S = 10.0
# the JVM's module openings that Debian's /usr/bin/activemq passes on Java > 8
OPENS = [
    "java.base/java.lang",
    "java.base/java.util",
    "java.base/java.util.concurrent",
    "java.base/java.util.concurrent.atomic",
    "java.base/java.net",
    "java.base/java.security",
    "java.naming/javax.naming.spi",
    "java.rmi/sun.rmi.transport.tcp",
]
LOG4J = """\
log4j.rootLogger=INFO, out
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d %-5p [%t] %c{1} - %m%n
"""


def activemq_xml(name: str, stomp_port: int, data_dir: Path, kahadb_dir: Path) -> str:
    """One node's broker configuration: STOMP on 127.0.0.1 only, no JMX, the statistics
    plugin, persistent messages in the shared KahaDB with a journal fsync per write, and a
    lock that a waiting slave tries every ``LOCK_RETRY_MS``.

    The connector sets TCP_NODELAY: ActiveMQ 5 leaves Nagle's algorithm on by default, and
    then each RECEIPT waited for the client's delayed ACK. One sender of 10-message
    batches got about 200 msg/s that way and about 1,700 with TCP_NODELAY (here, 2 cores).
    Artemis's acceptors set it by default."""
    return f"""\
<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans
         http://www.springframework.org/schema/beans/spring-beans.xsd
         http://activemq.apache.org/schema/core
         http://activemq.apache.org/schema/core/activemq-core.xsd">
  <!-- written by mqlab (mqlab.brokers.artemis.cluster): the ActiveMQ Artemis stand-in -->
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="{name}"
          useJmx="false" persistent="true" schedulerSupport="false"
          advisorySupport="false" dataDirectory="{data_dir}">
    <persistenceAdapter>
      <kahaDB directory="{kahadb_dir}" journalDiskSyncStrategy="always">
        <locker>
          <shared-file-locker lockAcquireSleepInterval="{LOCK_RETRY_MS}"/>
        </locker>
      </kahaDB>
    </persistenceAdapter>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage percentOfJvmHeap="60"/></memoryUsage>
        <storeUsage><storeUsage limit="4 gb"/></storeUsage>
        <tempUsage><tempUsage limit="1 gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
    <plugins>
      <statisticsBrokerPlugin/>
    </plugins>
    <transportConnectors>
      <transportConnector name="stomp"
                          uri="stomp://127.0.0.1:{stomp_port}?transport.tcpNoDelay=true"/>
    </transportConnectors>
  </broker>
</beans>
"""


def activemq_version() -> str:
    """The ActiveMQ release of Debian's package, from its launcher jar ("?" if unknown)."""
    try:
        with zipfile.ZipFile(ACTIVEMQ_JAR) as jar:
            text = jar.read(
                "META-INF/maven/org.apache.activemq/activemq-run/pom.properties"
            ).decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return "?"
    for line in text.splitlines():
        if line.startswith("version="):
            return line.split("=", 1)[1].strip()
    return "?"


class ArtemisCluster(LocalCluster):
    broker = "artemis"
    stand_in = (
        "Debian's ActiveMQ 5, an ActiveMQ Artemis stand-in over STOMP "
        "(shared-store master/slave, one KahaDB copy)"
    )
    start_timeout_s = 90.0
    runs_on_hosts = False  # on a lab whose images run the brokers: mqlab.brokers.image

    def __init__(self, workdir: Any, nodes: int | None = None, hosts: Any = None):
        if hosts is not None and not all(h.is_local for h in hosts):
            raise ClusterError(
                f"{self.broker}: the ActiveMQ 5 stand-in runs on this machine only "
                '(set cluster.target = "local")'
            )
        super().__init__(workdir, nodes)

    # -- files and processes ------------------------------------------------------------
    @property
    def kahadb(self) -> Path:
        return self.workdir / "shared" / "kahadb"

    def path(self, index: int) -> Path:
        return Path(str(self.node_dir(index)))

    def _prepare(self, progress: Progress) -> None:
        for p, what in ((ACTIVEMQ_JAR, "activemq"), (XSTREAM_JAR, "libxstream-java")):
            if not p.is_file():
                raise ClusterError(f"{p} not found (Debian package {what}; {FIX})")
        if shutil.which("java") is None:
            raise ClusterError(f"java not found ({FIX})")
        self.ports = {"stomp": process.free_ports(self.nodes)}
        self.kahadb.mkdir(parents=True, exist_ok=True)
        for i in range(self.nodes):
            d = self.path(i)
            (d / "conf").mkdir(parents=True, exist_ok=True)
            (d / "lib" / "extra").mkdir(parents=True, exist_ok=True)
            (d / "data").mkdir(exist_ok=True)
            (d / "tmp").mkdir(exist_ok=True)
            link = d / "lib" / "extra" / XSTREAM_JAR.name
            if not link.exists():
                link.symlink_to(XSTREAM_JAR)
            self.write(i, "conf/log4j.properties", LOG4J)
            self.write(
                i,
                "activemq.xml",
                activemq_xml(f"mqlab-{i}", self.ports["stomp"][i], d / "data", self.kahadb),
            )

    def command(self, index: int) -> list[str]:
        d = self.path(index)
        java = shutil.which("java") or "java"
        opens = [arg for module in OPENS for arg in ("--add-opens", f"{module}=ALL-UNNAMED")]
        return [
            java,
            HEAP,
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            *opens,
            f"-Djava.io.tmpdir={d / 'tmp'}",
            f"-Dactivemq.home={ACTIVEMQ_HOME}",
            f"-Dactivemq.base={d}",
            f"-Dactivemq.conf={d / 'conf'}",
            f"-Dactivemq.data={d / 'data'}",
            "-jar",
            str(ACTIVEMQ_JAR),
            "start",
            f"xbean:file:{d / 'activemq.xml'}",
        ]

    def _start_node(self, index: int) -> ProcessRecord:
        d = self.path(index)
        _p, rec = process.spawn(self.command(index), d / "activemq.log", cwd=d)
        return rec

    def _start_all(self, progress: Progress) -> None:
        """Node 0 first, so that it takes the store's lock and serves; then the others,
        which wait for the lock."""
        progress("starting artemis stand-in node 0 (ActiveMQ 5, the master)")
        self.procs[0] = self._start_node(0)
        self.save_state()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.serving():
            self._check_alive()
            if time.monotonic() > deadline:
                raise ClusterError(f"ActiveMQ node 0 not serving; see {self.log(0)}")
            time.sleep(0.1)
        for i in range(1, self.nodes):
            progress(f"starting artemis stand-in node {i} (ActiveMQ 5, a waiting slave)")
            self.procs[i] = self._start_node(i)

    def log(self, index: int) -> Path:
        return self.path(index) / "activemq.log"

    def _check_alive(self) -> None:
        for i, alive in enumerate(self.alive()):
            if i in self.procs and not alive:
                raise ClusterError(f"ActiveMQ node {i} exited; see {self.log(i)}")

    # -- health ---------------------------------------------------------------------
    def serving(self) -> list[int]:
        """The nodes that accept connections on their STOMP port (the master; a waiting
        slave opens no connector)."""
        alive = self.alive()
        return [
            i
            for i in range(self.nodes)
            if alive[i] and process.port_open("127.0.0.1", self.ports["stomp"][i])
        ]

    def waiting(self, index: int) -> bool:
        """Whether node ``index``, since its latest start, says in its log that it waits for
        the store's lock (a slave). Nothing else shows it: a waiting slave opens no port,
        and there is no JMX."""
        try:
            text = self.log(index).read_text(errors="replace")
        except OSError:
            return False
        latest = text.rfind(START_LINE)
        return latest >= 0 and SLAVE_LINE in text[latest:]

    def probe(self, index: int) -> tuple[bool, str]:
        """Send a probe to node ``index`` with a receipt, read it back and ack it (a selector
        picks it out): (served, why not)."""
        from mqlab.brokers.artemis.driver import ArtemisDriver, Settings

        s = Settings(
            receipt_timeout_s=PROBE_TIMEOUT_S, heartbeat_s=0.0, prefetch=1, connect_timeout_s=2.0
        )
        token = uuid.uuid4().hex
        ep = Endpoints("artemis", (NodeEndpoint(index, "127.0.0.1", self.ports["stomp"][index]),))
        driver = ArtemisDriver(s, ep, PROBE_QUEUE)
        try:
            return self._probe_with(driver, token)
        except DriverError as e:
            return False, str(e)

    @staticmethod
    def _probe_with(driver: Any, token: str) -> tuple[bool, str]:
        s = driver.settings
        cond = threading.Condition()
        got: list[Any] = []

        def arrived(frame: Any) -> None:
            with cond:
                got.append(frame)
                cond.notify_all()

        link = driver.connect(cond, arrived)
        try:
            body = token.encode()
            rid = link.receipt_id()
            link.frame(
                lambda: link.conn.send(
                    f"/queue/{PROBE_QUEUE}",
                    body,
                    headers={"persistent": "true", "mqlab_probe": token, "receipt": rid},
                ),
                "probe send",
            )
            link.wait([rid], s.receipt_timeout_s, "probe send")
            rid = link.receipt_id()
            link.frame(
                lambda: link.conn.subscribe(
                    f"/queue/{PROBE_QUEUE}",
                    id="probe",
                    ack="client-individual",
                    headers={"selector": f"mqlab_probe = '{token}'", "receipt": rid},
                ),
                "probe subscribe",
            )
            link.wait([rid], s.receipt_timeout_s, "probe subscribe")
            deadline = time.monotonic() + s.receipt_timeout_s
            with cond:
                while not got and not link.lost and time.monotonic() < deadline:
                    cond.wait(max(0.0, deadline - time.monotonic()))
            if not got:
                return False, "the probe did not come back"
            frame = got[0]
            rid = link.receipt_id()
            link.frame(lambda: link.conn.ack(frame.headers["ack"], receipt=rid), "probe ack")
            link.wait([rid], s.receipt_timeout_s, "probe ack")
            if bytes(frame.body) != body:
                return False, "the probe came back changed"
            return True, "ok"
        finally:
            link.close()

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for the ActiveMQ master to serve a probe and the slaves to wait")
        last: Any = "not started"
        while time.monotonic() < deadline:
            self._check_alive()
            health = self.health()
            if health["healthy"]:
                return
            last = health
            time.sleep(0.2)
        raise ClusterError(
            f"ActiveMQ stand-in not healthy after {self.start_timeout_s:.0f} s: {last}; "
            f"logs in {self.workdir}"
        )

    def role(self, index: int, alive: bool, serving: list[int]) -> str:
        if not alive:
            return "down"
        if index in serving:
            return "master"
        return "slave" if self.waiting(index) else "starting"

    def health(self) -> dict[str, Any]:
        """Healthy: one node serves and passes the probe, every other one waits for the
        store's lock."""
        alive = self.alive()
        serving = self.serving()
        probe = self.probe(serving[0]) if len(serving) == 1 else (False, f"serving: {serving}")
        roles = [self.role(i, alive[i], serving) for i in range(self.nodes)]
        return {
            "healthy": probe[0] and sorted(roles) == ["master"] + ["slave"] * (self.nodes - 1),
            "master": serving[0] if len(serving) == 1 else None,
            "probe": probe[1],
            "nodes": [
                {"index": i, "alive": alive[i], "role": roles[i], "port": self.ports["stomp"][i]}
                for i in range(self.nodes)
            ],
        }

    def leader(self, driver: Any) -> int:
        """The node that holds the store's lock and serves."""
        serving = self.serving()
        if len(serving) != 1:
            raise ClusterError(f"no single ActiveMQ master serves (serving: {serving})")
        return serving[0]

    # -- clients --------------------------------------------------------------------
    def endpoints(self) -> Endpoints:
        return Endpoints(
            "artemis",
            tuple(NodeEndpoint(i, "127.0.0.1", self.ports["stomp"][i]) for i in range(self.nodes)),
            {"server": self.server_versions()[0], "stand_in": True},
        )

    def server_versions(self) -> list[str]:
        return [f"ActiveMQ {activemq_version()} (Debian activemq; ActiveMQ Artemis stand-in)"]


CLUSTER = ArtemisCluster
