"""Clusters: real broker servers started, checked and stopped by mqlab, on one host or many.

A launcher subclass knows one broker's recipe (config files, start order, health).
Every node runs on a ``Host`` (``mqlab.hosts``): by default all nodes on this
machine on 127.0.0.1 with free ports (the embedded default); on a lab, node ``i`` on
``hosts[i]`` at that host's address with the broker's standard ports, started over SSH.
The same recipe serves both. This base keeps the state (PIDs, ports, data dirs) in
``state.json`` so that ``mqlab cluster up`` can return and a later ``status`` or
``down`` finds exactly the processes it started.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar

from mqlab.brokers import nodeconf, tools
from mqlab.brokers.base import Endpoints
from mqlab.errors import ClusterError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord

if TYPE_CHECKING:
    from mqlab.hosts.base import Host

LOG = logging.getLogger(__name__)
STATE_FORMAT_VERSION = 1
_STATE_LOCK = threading.Lock()  # one writer of a cluster's state file at a time
Progress = Callable[[str], None]
#: on the lab images (images/base.nix): the broker, its version and pins
IMAGE_INFO = "/etc/mqlab/broker.json"


def _quiet(_msg: str) -> None:
    pass


def _direct(address: str, port: int) -> tuple[str, int]:
    return address, port


class LocalCluster(ABC):
    """A cluster of ``nodes`` servers of one broker on loopback, data under ``workdir``."""

    broker: ClassVar[str]
    default_nodes: ClassVar[int] = 3
    start_timeout_s: ClassVar[float] = 60.0
    # what serves instead of the real system, for a local stand-in (a protocol
    # stand-in or an emulator): every table and report marks its runs, never quoted as
    # the real system's figures; None for the real server
    stand_in: ClassVar[str | None] = None
    # the launcher starts nodes on hosts of their own (a lab); False for a stand-in that
    # runs on this machine only: on a lab whose images run the brokers, the attach path
    # (``mqlab.brokers.image``) checks them instead
    runs_on_hosts: ClassVar[bool] = True
    # clients are sent on to the addresses the brokers advertise (Kafka's metadata, a
    # replica set's members): the coordinator must reach those, a tunnel is not enough
    follows_advertised: ClassVar[bool] = False

    def __init__(
        self,
        workdir: Path,
        nodes: int | None = None,
        hosts: list[Host] | None = None,
        server: dict[str, Any] | None = None,
    ):
        from mqlab.hosts.local import LocalHost

        self.workdir = Path(workdir)
        self.nodes = nodes or self.default_nodes
        if hosts is not None and len(hosts) < self.nodes:
            raise ClusterError(f"{self.nodes} {self.broker} nodes need {self.nodes} broker hosts")
        self.hosts: list[Host] = list(hosts[: self.nodes]) if hosts else [LocalHost()] * self.nodes
        self.procs: dict[int, ProcessRecord] = {}
        self.ports: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}
        if server:  # kept with the state: a cluster left up says what it was started with
            self.extra["server"] = dict(server)
        # on hosts: where clients and the coordinator connect from (brokers with access
        # lists, such as PostgreSQL's pg_hba.conf, let them in)
        self.trusted_addresses: list[str] = []
        # where the coordinator connects to reach a node's (address, port): the address
        # itself, or an SSH tunnel when the lab's addresses are private (AWS)
        self.reach: Callable[[str, int], tuple[str, int]] = _direct
        # the nodes are started by the lab's images at boot (AWS), not by mqlab: start()
        # only checks them, stop() leaves them running
        self.attached = False
        self.image: list[dict[str, Any]] = []

    # -- what a profile asks of the servers ---------------------------------------------
    @classmethod
    def server_config(cls, settings: Any) -> dict[str, Any]:
        """What of a profile's settings (the driver's Settings) the servers must be started
        with: a cluster started for one such configuration serves only profiles that ask for
        the same (``mqlab.run.pool``). Empty (the default) where no profile changes how the
        launcher starts the servers: the profile's settings are then the clients' and the
        topics' alone."""
        return {}

    @property
    def server(self) -> dict[str, Any]:
        """The configuration this cluster's servers were started with (``server_config``)."""
        return dict(self.extra.get("server") or {})

    # -- where nodes run ------------------------------------------------------------
    @property
    def on_hosts(self) -> bool:
        """Nodes on hosts of their own (a lab), not all on this machine's loopback."""
        return not all(h.is_local for h in self.hosts)

    def host(self, index: int) -> Host:
        return self.hosts[index]

    def addr(self, index: int) -> str:
        return self.hosts[index].address

    def node_dir(self, index: int) -> PurePosixPath:
        """Node ``index``'s directory on its host."""
        h = self.hosts[index]
        if h.is_local:
            return PurePosixPath(str(self.workdir)) / f"n{index}"
        return h.root / "clusters" / self.workdir.name / f"n{index}"

    def pick_ports(self, names: list[str]) -> dict[str, list[int]]:
        """Per port name, every node's port: free loopback ports, or the standard ones."""
        if self.on_hosts:
            std = nodeconf.standard_ports(self.broker, self.nodes)
            return {n: list(std[n]) for n in names}
        free = process.free_ports(len(names) * self.nodes)
        return {n: free[k * self.nodes : (k + 1) * self.nodes] for k, n in enumerate(names)}

    def binary(self, index: int, local: Path | None, name: str, fix: str) -> str:
        """The server binary as node ``index``'s host sees it."""
        h = self.hosts[index]
        if h.is_local:
            return str(tools.require(local, name, fix))
        if local is not None and h.run(["test", "-x", str(local)], check=False).rc == 0:
            return str(local)
        found = h.run(["sh", "-c", f"command -v {name}"], check=False).out.strip()
        if not found:
            raise ClusterError(f"{h.name}: {name} not found on the host ({fix})")
        return found

    def node_conf(self, index: int, data_dir: PurePosixPath | str) -> nodeconf.Node:
        """Node ``index`` as node configuration (``mqlab.brokers.nodeconf``) sees it."""
        return nodeconf.Node(
            self.broker,
            index,
            tuple(self.addr(n) for n in range(self.nodes)),
            {k: tuple(v) for k, v in self.ports.items() if isinstance(v, list)},
            str(data_dir),
            self.workdir.name,
            {},
        )

    def write(self, index: int, name: str, text: str) -> None:
        """Write a file into node ``index``'s directory on its host."""
        self.hosts[index].write_file(self.node_dir(index) / name, text)

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
        if self.attached:
            self._attach(progress)
            return
        for i in range(self.nodes):
            self.hosts[i].mkdir(self.node_dir(i))
        try:
            self._prepare(progress)
            self._start_all(progress)
            self.save_state()
            self._wait_healthy(time.monotonic() + self.start_timeout_s, progress)
            self.save_state()
        except BaseException:
            self.stop()
            raise

    # -- brokers the lab's images run -------------------------------------------------
    def _attach(self, progress: Progress) -> None:
        """Check the cluster the lab's images started at boot: the image on every host
        is this broker's, every node listens on its standard ports, and the broker's own
        health check passes."""
        std = nodeconf.standard_ports(self.broker, self.nodes)
        self.ports = {n: list(v) for n, v in std.items()}
        self.image = []
        for i in range(self.nodes):
            h = self.host(i)
            res = h.run(["cat", IMAGE_INFO], check=False)
            try:
                info = json.loads(res.out) if res.rc == 0 else None
            except ValueError:
                info = None
            if not isinstance(info, dict):
                raise ClusterError(
                    f"{h.name}: no {IMAGE_INFO} (not an mqlab broker image; "
                    "build the lab with `mqlab infra up`)"
                )
            if info.get("broker") != self.broker:
                raise ClusterError(
                    f"{h.name}: its image runs {info.get('broker')!r}, not {self.broker} "
                    "(the lab was built for another scenario: `mqlab infra up` this one)"
                )
            self.image.append(info)
        progress(f"checking the {self.broker} cluster the lab's images started")
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            health = self.health()
            if health.get("healthy"):
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{self.broker} cluster on the lab's broker hosts not healthy after "
                    f"{self.start_timeout_s:.0f} s: {health}"
                )
            time.sleep(1)

    def attached_versions(self) -> list[str]:
        return sorted({f"{self.broker} {i.get('version')}" for i in self.image})

    def stop(self, remove_data: bool = True) -> None:
        if self.attached:  # the lab's images own the nodes: `mqlab infra down` ends them
            shutil.rmtree(self.workdir, ignore_errors=True)
            return
        for i, rec in self.procs.items():
            self.hosts[i].stop(rec)
        self._after_stop()
        self.procs = {}
        if remove_data:
            for i in range(self.nodes):
                if not self.hosts[i].is_local:
                    self.hosts[i].remove_tree(self.node_dir(i).parent)
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            self.save_state()

    def _after_stop(self) -> None:  # noqa: B027 - optional hook
        """Hook for helpers outside the node processes (e.g. epmd)."""

    def _own_processes(self, fault: str) -> None:
        """Process faults act on the processes mqlab started; the images' are not ours."""
        if self.attached:
            raise ClusterError(
                f"{fault}: the lab's images run the {self.broker} nodes, not mqlab (no process "
                "of theirs to signal); use partition, netem or power_loss on an AWS lab"
            )

    def kill_node(self, index: int) -> None:
        """Hard-kill node ``index`` (SIGKILL its process group): a crash, for fault tests."""
        self._own_processes("kill_node")
        self.hosts[index].stop(self.procs[index], timeout_s=5, sig=signal.SIGKILL)
        self.save_state()

    def leader(self, driver: Any) -> int:
        """The node that leads ``driver``'s queue now. By default node 0, the primary of
        primary/replica clusters (PostgreSQL, Redis) and the only node of stand-ins."""
        return 0

    def pause_node(self, index: int) -> None:
        """Freeze node ``index`` (SIGSTOP to its process group): a stalled, not dead, node."""
        self._own_processes("pause_node")
        self.hosts[index].signal(self.procs[index], signal.SIGSTOP)

    def resume_node(self, index: int) -> None:
        self._own_processes("resume_node")
        self.hosts[index].signal(self.procs[index], signal.SIGCONT)

    def crash_all(self) -> None:
        """Hard-kill every node at once (a process crash: the page cache survives it): each
        node is killed as ``kill_node`` kills it, all of them together."""
        self._own_processes("crash_all")
        self._each([i for i in range(self.nodes) if i in self.procs], self.kill_node)

    def restart_nodes(self, indices: list[int]) -> None:
        """Restart several nodes together (after ``crash_all``), each as ``restart_node``."""
        self._each(indices, self.restart_node)

    def _each(self, indices: list[int], action: Callable[[int], None]) -> None:
        """``action`` on every node of ``indices`` at once (one thread per node); the
        first error is raised once all have ended."""
        with ThreadPoolExecutor(max_workers=max(1, len(indices))) as pool:
            futures = [pool.submit(action, i) for i in indices]
        for f in futures:
            f.result()

    def restart_node(self, index: int) -> None:
        self._own_processes("restart_node")
        if index in self.procs and self.hosts[index].is_alive(self.procs[index]):
            return
        self.procs[index] = self._start_node(index)
        self.save_state()

    def alive(self) -> list[bool]:
        if self.attached:  # not our processes: a node is alive while its host listens
            first = next(iter(nodeconf.broker_ports(self.broker)))
            return [self.host(i).listening([self.ports[first][i]])[0] for i in range(self.nodes)]
        out = [False] * self.nodes
        by_host: dict[int, list[int]] = {}
        for i in range(self.nodes):
            if i in self.procs:
                by_host.setdefault(id(self.hosts[i]), []).append(i)
        for idx in by_host.values():
            for i, ok in zip(
                idx, self.hosts[idx[0]].alive([self.procs[i] for i in idx]), strict=True
            ):
                out[i] = ok
        return out

    # -- state ----------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.workdir / "state.json"

    def save_state(self) -> None:
        with _STATE_LOCK:  # nodes killed or restarted together save from their threads
            self._save_state()

    def _save_state(self) -> None:
        data = {
            "format_version": STATE_FORMAT_VERSION,
            "broker": self.broker,
            "nodes": self.nodes,
            "workdir": str(self.workdir),
            "hosts": [h.name for h in self.hosts],
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
