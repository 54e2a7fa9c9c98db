"""What produced a run: versions, pins, host, clock. Nothing secret or machine-private
(no hostnames, user names, IP addresses other than loopback, or absolute paths)."""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from mqlab.results.archive.formats import FORMAT_VERSION

PROJECT_DIR = Path(__file__).resolve().parents[3]
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


def flake_info() -> dict[str, Any]:
    try:
        from mqlab.provenance import flake_provenance  # written with the Nix flake
    except ImportError:
        return {
            "flake_rev": os.environ.get("MQLAB_FLAKE_REV"),
            "nixpkgs_rev": os.environ.get("MQLAB_NIXPKGS_REV"),
        }
    return dict(flake_provenance())


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
    }


def clock_info(target: str) -> dict[str, Any]:
    """The clocks behind the latency figures. Only what is known is written: on the local
    target every worker and broker reads one kernel clock, so there is no offset to
    measure; on other targets nothing here measures offsets (the fleet will), so none
    are claimed."""
    info: dict[str, Any] = {
        "source": _read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "wall_clock": "time.time_ns",
    }
    if target == "local":
        info["hosts"] = {"local": {"offset_ms": 0.0, "error_bound_ms": 0.0}}
        info["note"] = "one host: every worker and broker reads the same kernel clock"
    else:
        info["hosts"] = {}
        info["note"] = "clock offsets between hosts were not measured"
    return info


def base_manifest(run_id: str, scenario: Any, driver_libraries: tuple[str, ...]) -> dict[str, Any]:
    libs = {name: _version(name) for name in (*CORE_LIBRARIES, *driver_libraries)}
    return {
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "status": "partial",
        "end_reason": "running",
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "ended_at": None,
        "measure": {"start_ms": None, "warmup_end_ms": None, "end_ms": None},
        "mqlab": {"version": _version("mqlab"), **git_info(), **flake_info()},
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
        "host": host_info(),
        "clock": clock_info(scenario.cluster.target),
        "workers": [],
        "faults": [],
        "drain": None,
    }
