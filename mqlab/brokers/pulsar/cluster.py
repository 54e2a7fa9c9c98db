"""Pulsar API: the ``pulsar-lite`` server from the PyPI wheel of that name.

A protocol stand-in, not a Pulsar to benchmark: one process, RocksDB storage, no
BookKeeper, no replication (one copy of each message), no admin REST API. It lets the
Pulsar driver run its contract suite and the short scenario locally; real numbers come
from real Pulsar clusters (3 brokers, 3 bookies) in the cloud path. ``nodes`` is always
1; profiles run against it keep one copy (``pulsar-standin``).

Both its ports are on 127.0.0.1 and free: the Pulsar binary protocol (``--addr``) and
the Prometheus metrics page, which it would otherwise open on 0.0.0.0:8080 (set in
``pulsar-lite.toml``). Its data goes next to ``--db-path`` (``db.rocksdb``,
``db.metadata.json``) in the node's directory. The health check produces a probe
message and consumes and acks it: the server stores and serves, not only listens.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

from mqlab.brokers import tools
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.errors import ClusterError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord

LOG = logging.getLogger(__name__)
#: pulsar-lite recomputes its subscription gauges (backlog, unacked) this often
STATS_PERIOD_S = 5.0
PROBE_TIMEOUT_S = 5.0


def _binary() -> str:
    wheel = None
    for site in sys.path:
        p = Path(site) / "pulsar_lite" / "bin" / "pulsar-lite"
        if p.is_file():
            wheel = p
            break
    return str(
        tools.require(
            wheel or tools.venv_bin("pulsar-lite"),
            "pulsar-lite (from the pulsar-lite wheel)",
            "install the locked environment: scripts/bootstrap",
        )
    )


def config_text(metrics_port: int) -> str:
    """``pulsar-lite.toml``: the metrics page on loopback instead of 0.0.0.0:8080."""
    return f'[metrics]\naddr = "127.0.0.1:{metrics_port}"\n'


def lite_version() -> str:
    try:
        return metadata.version("pulsar-lite")
    except metadata.PackageNotFoundError:
        return "?"


class PulsarCluster(LocalCluster):
    broker = "pulsar"
    stand_in = "pulsar-lite, a Pulsar protocol stand-in (one process, one copy)"
    runs_on_hosts = False  # on a lab whose images run the brokers: mqlab.brokers.image
    default_nodes = 1
    start_timeout_s = 20.0

    def __init__(self, workdir: Any, nodes: int | None = None, hosts: Any = None):
        if hosts is not None and not all(h.is_local for h in hosts):
            raise ClusterError(
                f"{self.broker}: the pulsar-lite stand-in runs on this machine only "
                '(set cluster.target = "local")'
            )
        super().__init__(workdir, 1)

    @property
    def node_path(self) -> Path:
        return Path(str(self.node_dir(0)))

    def _prepare(self, progress: Progress) -> None:
        broker, metrics = process.free_ports(2)
        self.ports = {"broker": [broker], "metrics": [metrics]}
        self.write(0, "pulsar-lite.toml", config_text(metrics))

    def _start_node(self, index: int) -> ProcessRecord:
        d = self.node_path
        _p, rec = process.spawn(
            [
                _binary(),
                "--config",
                str(d / "pulsar-lite.toml"),
                "--addr",
                f"127.0.0.1:{self.ports['broker'][0]}",
                "--db-path",
                str(d / "db"),
                "--log-level",
                "warn",
            ],
            d / "pulsar-lite.log",
            cwd=d,
        )
        return rec

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for pulsar-lite (Pulsar API stand-in)")
        last = "not listening yet"
        while time.monotonic() < deadline:
            if not self.alive()[0]:
                raise ClusterError(f"pulsar-lite exited; see {self.node_path / 'pulsar-lite.log'}")
            if process.port_open("127.0.0.1", self.ports["broker"][0]):
                ok, last = self._probe()
                if ok:
                    return
            time.sleep(0.1)
        raise ClusterError(f"pulsar-lite not serving after {self.start_timeout_s:.0f} s: {last}")

    def _probe(self) -> tuple[bool, str]:
        """Send one message on a topic of its own, receive and ack it: (served, why not)."""
        import pulsar

        from mqlab.brokers.pulsar.driver import client_logger, topic_name

        topic = topic_name(f"mqlab-health-{uuid.uuid4().hex[:8]}")
        body = uuid.uuid4().bytes
        client = pulsar.Client(
            f"pulsar://{self.service}", operation_timeout_seconds=5, logger=client_logger()
        )
        try:
            consumer = client.subscribe(
                topic,
                "health",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            producer = client.create_producer(topic, send_timeout_millis=5000)
            producer.send(body)
            producer.close()
            m = consumer.receive(int(PROBE_TIMEOUT_S * 1000))  # the only message there
            consumer.acknowledge(m)
            with contextlib.suppress(Exception):
                consumer.unsubscribe()
            if m.data() != body:
                return False, "the probe came back changed"
            return True, "ok"
        except Exception as e:  # noqa: BLE001 - any failure means: not serving yet
            return False, f"{type(e).__name__}: {e}"
        finally:
            client.close()

    def _metrics_ok(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(self.metrics_url, timeout=2) as resp:
                return b"pulsar_" in resp.read()
        except OSError:
            return False

    @property
    def service(self) -> str:
        return f"127.0.0.1:{self.ports['broker'][0]}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['metrics'][0]}/metrics"

    def health(self) -> dict[str, Any]:
        alive = self.alive()[0]
        served, why = self._probe() if alive else (False, "not running")
        metrics = alive and self._metrics_ok()
        return {
            "healthy": served and metrics,
            "nodes": [
                {
                    "index": 0,
                    "alive": alive,
                    "probe": why,
                    "metrics": metrics,
                    "port": self.ports["broker"][0],
                }
            ],
        }

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "pulsar",
            (NodeEndpoint(0, "127.0.0.1", self.ports["broker"][0]),),
            {
                "server": self.server_versions()[0],
                "stand_in": True,
                "metrics_url": self.metrics_url,
                "stats_period_s": STATS_PERIOD_S,
            },
        )

    def server_versions(self) -> list[str]:
        return [f"pulsar-lite {lite_version()} (Pulsar API stand-in)"]


CLUSTER = PulsarCluster
