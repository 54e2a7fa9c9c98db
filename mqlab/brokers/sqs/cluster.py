"""SQS: a ``moto_server`` (PyPI ``moto[server]``) on 127.0.0.1, emulating the SQS API.

A stand-in for tests: moto has SQS's semantics (visibility timeout, redelivery,
ApproximateReceiveCount, long polling) but answers each batch call in ~150 ms,
far too slow for numbers. One process; ``nodes`` is always 1. The endpoint's
``extra`` tells the driver to use dummy credentials (moto accepts any), so no
real AWS credentials are involved or written anywhere.
"""

from __future__ import annotations

import time
import urllib.request
from importlib import metadata
from typing import Any

from mqlab.brokers import tools
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress
from mqlab.errors import ClusterError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord

REGION = "eu-west-1"


def _binary() -> str:
    return str(
        tools.require(
            tools.venv_bin("moto_server"),
            "moto_server",
            "install the locked environment: scripts/bootstrap",
        )
    )


class SqsCluster(LocalCluster):
    broker = "sqs"
    stand_in = "moto, an SQS API emulator (about 150 ms a call)"
    default_nodes = 1
    start_timeout_s = 30.0

    def __init__(
        self, workdir: Any, nodes: int | None = None, hosts: Any = None, server: Any = None
    ):
        if hosts is not None and not all(h.is_local for h in hosts):
            raise ClusterError(
                f"{self.broker}: the moto SQS emulator runs on this machine only "
                '(set cluster.target = "local")'
            )
        super().__init__(workdir, 1, server=server)

    def leader(self, driver: Any) -> int:
        raise ClusterError("sqs has no leader node (a kill_leader fault cannot apply)")

    def _prepare(self, progress: Progress) -> None:
        self.ports = {"http": process.free_ports(1)}

    def _start_node(self, index: int) -> ProcessRecord:
        _p, rec = process.spawn(
            [_binary(), "-H", "127.0.0.1", "-p", str(self.ports["http"][0])],
            self.workdir / "moto.log",
            cwd=self.workdir,
        )
        return rec

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['http'][0]}"

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/moto-api/", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for moto_server (SQS API emulator)")
        while time.monotonic() < deadline:
            if not self.alive()[0]:
                raise ClusterError(f"moto_server exited; see {self.workdir / 'moto.log'}")
            if self._answers():
                return
            time.sleep(0.1)
        raise ClusterError(f"moto_server not answering after {self.start_timeout_s:.0f} s")

    def health(self) -> dict[str, Any]:
        alive = self.alive()[0]
        answers = alive and self._answers()
        return {
            "healthy": answers,
            "nodes": [{"index": 0, "alive": alive, "http": answers, "port": self.ports["http"][0]}],
        }

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "sqs",
            (NodeEndpoint(0, "127.0.0.1", self.ports["http"][0]),),
            {
                "endpoint_url": self.url,
                "region": REGION,
                "dummy_credentials": True,
                "server": self.server_versions()[0],
            },
        )

    def server_versions(self) -> list[str]:
        return [f"moto {metadata.version('moto')} (SQS API emulator)"]


CLUSTER = SqsCluster
