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
import importlib.metadata as md
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def base_manifest(
    run_id: str,
    scenario: Any,
    driver_libraries: tuple[str, ...],
    lab: dict[str, Any] | None = None,
    clock: dict[str, Any] | None = None,
    flake: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """The manifest as a run starts. ``lab``: ``{"kind": "local"|"netns"|"ssh"|"aws",
    "name", "price_per_hour_usd": float | None, "hosts": {name: {"role", "address"}}}``
    (default :func:`local_lab`); ``clock``: the ``clock`` section the coordinator knows
    as the run starts (``mqlab.run.clocks.clock_info``); ``flake``: which Nix flake
    build runs (``mqlab.provenance.flake_provenance``; default: none)."""
    libs = {name: _version(name) for name in (*CORE_LIBRARIES, *driver_libraries)}
    return {
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "status": "partial",
        "end_reason": "running",
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "ended_at": None,
        "measure": {"start_ms": None, "warmup_end_ms": None, "end_ms": None},
        "mqlab": {"version": _version("mqlab"), **git_info(), **(flake or NO_FLAKE)},
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable_in_venv": sys.prefix != sys.base_prefix,
        },
        "libraries": libs,
        "broker": {
            "name": scenario.broker,
            "profile": scenario.profile.name,
            "server_versions": [],
        },
        "cluster": {
            "target": scenario.cluster.target,
            "nodes": scenario.cluster.nodes,
            "reused": False,
        },
        # processes_per_node as the scenario says (None: each node's cores); processes:
        # {"sender": [per node], "receiver": [per node]} as run, set once resolved
        "clients": {
            "processes_per_node": scenario.clients.processes_per_node,
            "processes": None,
        },
        # workload.queues: the run's queues (topics, streams); their names once created
        "queues": scenario.workload.queues,
        "queue_names": None,
        "host": host_info(),
        "clock": dict(clock) if clock is not None else {},
        "lab": dict(lab) if lab is not None else local_lab(),
        "workers": [],
        "faults": [],
        "drain": None,
    }
