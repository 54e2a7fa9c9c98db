"""What produced a run: versions, pins, host, clock, lab. Nothing secret or
machine-private on a local run (no hostnames, user names, IP addresses other than
loopback, or absolute paths); a lab's hosts are named as its inventory names them.

The ``clock`` section has the shapes of :mod:`mqlab.hosts.clocks` (``local_section`` on
one host, ``unmeasured_section`` until the coordinator replaces it with
``clock_section`` for a run on several hosts), and the coordinator passes it, as it
passes the ``lab`` section (where the run ran and what the lab costs an hour; default:
this machine) and the flake's revisions: this module imports nothing of mqlab but its
archive format.
"""

from __future__ import annotations

import datetime as dt
import enum
import importlib.metadata as md
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mqlab.archive.faultlog import FaultEntry
from mqlab.archive.formats import FORMAT_VERSION

PROJECT_DIR = Path(__file__).resolve().parents[2]
NO_FLAKE = {"flake_rev": None, "nixpkgs_rev": None}
CORE_LIBRARIES = ("mqlab", "hdrhistogram", "pyroaring", "numpy", "click")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def git_info() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(PROJECT_DIR), *args],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def host_info() -> dict[str, Any]:
    cpu_model = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * 1024
    os_name = None
    for line in (_read("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            os_name = line.split("=", 1)[1].strip('"')
    return {
        "cpu_model": cpu_model,
        "cpus": os.cpu_count(),
        "memory_bytes": mem,
        "kernel": platform.release(),
        "os": os_name,
        "machine": platform.machine(),
        "clocksource": _read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
    }


def local_lab() -> dict[str, Any]:
    """The ``lab`` section of a run on this machine: no price."""
    return {
        "kind": "local",
        "name": "local",
        "price_per_hour_usd": None,
        "hosts": {"local": {"role": "all", "address": "127.0.0.1"}},
    }


class _Unset(enum.Enum):
    """A section's field not known yet: left out of the JSON (readers tell "not recorded"
    from ``null``, e.g. ``broker.stand_in`` in archives from before it was recorded)."""

    NOT_SET = 0


NOT_SET = _Unset.NOT_SET


def _present(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not NOT_SET}


@dataclass
class Measure:
    """The measured window, wall clock ms: senders' start, warm-up's end, the end."""

    start_ms: int | None = None
    warmup_end_ms: int | None = None
    end_ms: int | None = None


@dataclass
class Broker:
    name: str
    profile: str
    server_versions: list[Any] = field(default_factory=list)
    stand_in: str | None | _Unset = NOT_SET  # what served instead of the real system


@dataclass
class Cluster:
    target: str
    nodes: int
    reused: bool = False
    # [{"index", "host", "address", "port"}] once the cluster is up
    nodes_at: list[dict[str, Any]] | _Unset = NOT_SET
    brokers_started_by: str | _Unset = NOT_SET  # "image" | "mqlab"
    coordinator_reach: str | _Unset = NOT_SET  # "ssh tunnel" | "direct"


@dataclass
class Clients:
    # as the scenario says (None: each node's cores, at most its threads)
    processes_per_node: int | None
    # {"sender": [per node], "receiver": [per node]} as run, set once resolved; a node's
    # threads are spread over its processes
    processes: dict[str, list[int]] | None = None
    # {"sender": senders of each sender node, "receiver": receivers of each receiver
    # node}, whatever the processes (absent in manifests from before: threads were per
    # process then)
    threads_per_node: dict[str, int] | _Unset = NOT_SET
    send_paths: list[str] | _Unset = NOT_SET  # how the senders send, once they are ready
    receive_paths: list[str] | _Unset = NOT_SET  # how the receivers receive, once ready


@dataclass
class Manifest:
    """What produced a run, as a typed record; :meth:`to_json` is ``manifest.json``."""

    run_id: str
    started_at: str
    mqlab: dict[str, Any]
    python: dict[str, Any]
    libraries: dict[str, str | None]
    broker: Broker
    cluster: Cluster
    clients: Clients
    queues: int  # workload.queues: the run's queues (topics, streams)
    host: dict[str, Any]
    clock: dict[str, Any]
    lab: dict[str, Any]
    status: str = "partial"  # "complete" | "partial"
    end_reason: str = "running"
    ended_at: str | None = None
    measure: Measure = field(default_factory=Measure)
    queue_names: list[str] | None = None  # their names once created
    workers: list[dict[str, Any]] = field(default_factory=list)
    # the fault log: one entry a fault applied or ended (action, node, at_ms, ...)
    faults: list[FaultEntry] = field(default_factory=list)
    drain: dict[str, Any] | None = None  # {"ended_by", "seconds"}
    # {"brokers_recorded": bool, ...} once the measured run starts
    cpu: dict[str, Any] | _Unset = NOT_SET
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        return _present(
            {
                "format_version": self.format_version,
                "run_id": self.run_id,
                "status": self.status,
                "end_reason": self.end_reason,
                "started_at": self.started_at,
                "ended_at": self.ended_at,
                "measure": asdict(self.measure),
                "mqlab": self.mqlab,
                "python": self.python,
                "libraries": self.libraries,
                "broker": _present(asdict(self.broker)),
                "cluster": _present(asdict(self.cluster)),
                "clients": _present(asdict(self.clients)),
                "queues": self.queues,
                "queue_names": self.queue_names,
                "host": self.host,
                "clock": self.clock,
                "lab": self.lab,
                "workers": self.workers,
                "faults": [e.to_json() for e in self.faults],
                "drain": self.drain,
                "cpu": self.cpu,
            }
        )


def base_manifest(
    run_id: str,
    scenario: Any,
    driver_libraries: tuple[str, ...],
    lab: dict[str, Any] | None = None,
    clock: dict[str, Any] | None = None,
    flake: dict[str, str | None] | None = None,
) -> Manifest:
    """The manifest as a run starts. ``lab``: ``{"kind": "local"|"netns"|"ssh"|"aws",
    "name", "price_per_hour_usd": float | None, "hosts": {name: {"role", "address"}}}``
    (default :func:`local_lab`); ``clock``: the ``clock`` section the coordinator knows
    as the run starts (``mqlab.run.clocks.clock_info``); ``flake``: which Nix flake
    build runs (``mqlab.provenance.flake_provenance``; default: none)."""
    libs = {name: _version(name) for name in (*CORE_LIBRARIES, *driver_libraries)}
    return Manifest(
        run_id=run_id,
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        mqlab={"version": _version("mqlab"), **git_info(), **(flake or NO_FLAKE)},
        python={
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable_in_venv": sys.prefix != sys.base_prefix,
        },
        libraries=libs,
        broker=Broker(scenario.broker, scenario.profile.name),
        cluster=Cluster(scenario.cluster.target, scenario.cluster.nodes),
        clients=Clients(
            scenario.clients.processes_per_node,
            threads_per_node={
                "sender": scenario.clients.sender_threads,
                "receiver": scenario.clients.receiver_threads,
            },
        ),
        queues=scenario.workload.queues,
        host=host_info(),
        clock=dict(clock) if clock is not None else {},
        lab=dict(lab) if lab is not None else local_lab(),
    )
