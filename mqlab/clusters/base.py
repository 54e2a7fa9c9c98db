"""Local clusters: real broker servers on 127.0.0.1, started, checked and stopped by mqlab.

A launcher subclass knows one broker's recipe (config files, start order,
health). This base keeps the state (PIDs, ports, data dir) in ``state.json`` so
that ``mqlab cluster up`` can return and a later ``status`` or ``down`` finds
exactly the processes it started.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from mqlab.clusters import process
from mqlab.clusters.process import ProcessRecord
from mqlab.drivers.base import Endpoints
from mqlab.errors import ClusterError

LOG = logging.getLogger(__name__)
STATE_FORMAT_VERSION = 1
Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


class LocalCluster(ABC):
    """A cluster of ``nodes`` servers of one broker on loopback, data under ``workdir``."""

    broker: ClassVar[str]
    default_nodes: ClassVar[int] = 3
    start_timeout_s: ClassVar[float] = 60.0

    def __init__(self, workdir: Path, nodes: int | None = None):
        self.workdir = Path(workdir)
        self.nodes = nodes or self.default_nodes
        self.procs: dict[int, ProcessRecord] = {}
        self.ports: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}

    # -- recipe ---------------------------------------------------------------
    @abstractmethod
    def _prepare(self, progress: Progress) -> None:
        """Pick ports, write configs, initialise data dirs."""

    @abstractmethod
    def _start_node(self, index: int) -> ProcessRecord:
        """Start node ``index`` (configs already written)."""

    @abstractmethod
    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        """Return once the cluster serves replicated writes; raise ClusterError at deadline."""

    @abstractmethod
    def endpoints(self) -> Endpoints: ...

    @abstractmethod
    def health(self) -> dict[str, Any]:
        """A quick check for ``status``: {"healthy": bool, "nodes": [...], ...}."""

    def server_versions(self) -> list[str]:
        return []

    def _start_all(self, progress: Progress) -> None:
        for i in range(self.nodes):
            progress(f"starting {self.broker} node {i}")
            self.procs[i] = self._start_node(i)

    # -- lifecycle ------------------------------------------------------------
    def start(self, progress: Progress = _quiet) -> None:
        """Bring the cluster up; on any failure (or Ctrl-C) stop what was started."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._prepare(progress)
            self._start_all(progress)
            self.save_state()
            self._wait_healthy(time.monotonic() + self.start_timeout_s, progress)
            self.save_state()
        except BaseException:
            self.stop()
            raise

    def stop(self, remove_data: bool = True) -> None:
        for rec in self.procs.values():
            process.stop(rec)
        self._after_stop()
        self.procs = {}
        if remove_data:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            self.save_state()

    def _after_stop(self) -> None:  # noqa: B027 - optional hook
        """Hook for helpers outside the node processes (e.g. epmd)."""

    def kill_node(self, index: int) -> None:
        """Hard-kill node ``index`` (SIGKILL its process group): a crash, for fault tests."""
        import signal

        process.stop(self.procs[index], timeout_s=5, sig=signal.SIGKILL)
        self.save_state()

    def restart_node(self, index: int) -> None:
        if index in self.procs and process.is_alive(self.procs[index]):
            return
        self.procs[index] = self._start_node(index)
        self.save_state()

    def alive(self) -> list[bool]:
        return [i in self.procs and process.is_alive(self.procs[i]) for i in range(self.nodes)]

    # -- state ----------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.workdir / "state.json"

    def save_state(self) -> None:
        data = {
            "format_version": STATE_FORMAT_VERSION,
            "broker": self.broker,
            "nodes": self.nodes,
            "workdir": str(self.workdir),
            "procs": {str(i): r.to_json() for i, r in self.procs.items()},
            "ports": self.ports,
            "extra": self.extra,
            "endpoints": self.endpoints().to_json() if self.ports else None,
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.state_path)

    @classmethod
    def load(cls, workdir: Path) -> LocalCluster:
        path = Path(workdir) / "state.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ClusterError(f"{path}: cannot read cluster state ({e})") from None
        if data.get("format_version") != STATE_FORMAT_VERSION:
            raise ClusterError(
                f"{path}: unsupported state format_version {data.get('format_version')!r}"
            )
        obj = cls(Path(data["workdir"]), data["nodes"])
        obj.procs = {int(i): ProcessRecord.from_json(r) for i, r in data["procs"].items()}
        obj.ports = data["ports"]
        obj.extra = data["extra"]
        return obj
