"""The manifest a run starts with (mqlab/archive/manifest.py): its sections, the
git state, the host facts read from /proc, the clock and lab sections, and nothing
machine-private. Expected values are written out by hand or read from another source
than the one the manifest uses."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy
import pytest

from mqlab.archive import manifest
from mqlab.provenance import flake_provenance
from mqlab.run.clocks import clock_info

ROOT = Path(__file__).resolve().parents[2]


def new(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The manifest as a run starts, as ``manifest.json`` has it."""
    return manifest.base_manifest(*args, **kwargs).to_json()


def scenario(target: str = "local", budget_ms: float | None = None) -> Any:
    return SimpleNamespace(
        broker="nats",
        profile=SimpleNamespace(name="nats-r3"),
        cluster=SimpleNamespace(target=target, nodes=3, clock_budget_ms=budget_ms),
        clients=SimpleNamespace(processes_per_node=None, sender_threads=3, receiver_threads=4),
        workload=SimpleNamespace(queues=1),
    )


def test_a_new_manifest_says_the_run_is_running() -> None:
    before = dt.datetime.now(dt.UTC)
    m = new("r-1", scenario(), ("nats-py", "no-such-dist-xyz"))
    after = dt.datetime.now(dt.UTC)
    assert list(m) == [
        "format_version",
        "run_id",
        "status",
        "end_reason",
        "started_at",
        "ended_at",
        "measure",
        "mqlab",
        "python",
        "libraries",
        "broker",
        "cluster",
        "clients",
        "queues",
        "queue_names",
        "host",
        "clock",
        "lab",
        "workers",
        "faults",
        "drain",
    ]
    assert (m["format_version"], m["run_id"], m["status"], m["end_reason"]) == (
        2,
        "r-1",
        "partial",  # until the run ends well
        "running",
    )
    assert m["ended_at"] is None and m["drain"] is None
    assert m["measure"] == {"start_ms": None, "warmup_end_ms": None, "end_ms": None}
    assert m["broker"] == {"name": "nats", "profile": "nats-r3", "server_versions": []}
    assert m["cluster"] == {"target": "local", "nodes": 3, "reused": False}
    assert m["clients"] == {
        "processes_per_node": None,
        "processes": None,  # resolved by the run
        "threads_per_node": {"sender": 3, "receiver": 4},  # the scenario's, per node
    }
    assert (m["queues"], m["queue_names"]) == (1, None)  # names once the run made them
    assert m["workers"] == [] and m["faults"] == []
    # started_at: UTC, to the millisecond, taken during the call
    assert m["started_at"].endswith("+00:00") and len(m["started_at"]) == 29
    started = dt.datetime.fromisoformat(m["started_at"])
    assert before - dt.timedelta(milliseconds=1) <= started <= after


def test_libraries_and_versions() -> None:
    m = new("r", scenario(), ("nats-py", "no-such-dist-xyz"))
    libs = m["libraries"]
    assert list(libs) == [
        "mqlab",
        "hdrhistogram",
        "pyroaring",
        "numpy",
        "click",
        "nats-py",
        "no-such-dist-xyz",
    ]
    assert libs["numpy"] == numpy.__version__
    assert libs["no-such-dist-xyz"] is None  # not installed: named, no version
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert libs["mqlab"] == m["mqlab"]["version"] == version
    py = m["python"]
    assert py["version"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert py["implementation"] == "CPython"
    # a virtual environment is marked by the pyvenv.cfg file at its prefix
    assert py["executable_in_venv"] is (Path(sys.prefix) / "pyvenv.cfg").is_file()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_git_commit_and_dirty_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.setattr(manifest, "PROJECT_DIR", repo)
    assert manifest.git_info() == {"git_commit": None, "git_dirty": None}  # not a repository
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")
    assert len(head) == 40
    assert manifest.git_info() == {"git_commit": head, "git_dirty": False}
    (repo / "new.txt").write_text("untracked\n")  # untracked files do not make it dirty
    assert manifest.git_info() == {"git_commit": head, "git_dirty": False}
    (repo / "a.txt").write_text("two\n")
    assert manifest.git_info() == {"git_commit": head, "git_dirty": True}


def test_flake_revisions_come_from_the_wrappers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MQLAB_FLAKE_REV", "abc123")
    monkeypatch.setenv("MQLAB_NIXPKGS_REV", "")
    m = new("r", scenario(), (), flake=flake_provenance())
    assert {k: m["mqlab"][k] for k in ("flake_rev", "nixpkgs_rev")} == {
        "flake_rev": "abc123",
        "nixpkgs_rev": None,
    }
    monkeypatch.delenv("MQLAB_FLAKE_REV")
    monkeypatch.delenv("MQLAB_NIXPKGS_REV")
    m = new("r", scenario(), (), flake=flake_provenance())
    assert m["mqlab"]["flake_rev"] is None and m["mqlab"]["nixpkgs_rev"] is None


PROC = {
    "/proc/cpuinfo": "processor\t: 0\nvendor_id\t: Test\nmodel name\t: Test CPU @ 2.00GHz\n"
    "processor\t: 1\nmodel name\t: Other CPU\n",
    "/proc/meminfo": "MemTotal:       16384 kB\nMemFree:         1024 kB\n",
    "/etc/os-release": 'NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
    "/sys/devices/system/clocksource/clocksource0/current_clocksource": "tsc",
}


def test_host_facts_from_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest, "_read", lambda path: PROC.get(path))
    host = manifest.host_info()
    assert host == {
        "cpu_model": "Test CPU @ 2.00GHz",  # the first one
        "cpus": os.cpu_count(),
        "memory_bytes": 16384 * 1024,
        "kernel": platform.release(),
        "os": "Debian GNU/Linux 12 (bookworm)",
        "machine": platform.machine(),
        "clocksource": "tsc",
    }
    monkeypatch.setattr(manifest, "_read", lambda path: None)  # nothing readable
    host = manifest.host_info()
    assert (host["cpu_model"], host["memory_bytes"], host["os"], host["clocksource"]) == (
        None,
        None,
        None,
        None,
    )


def test_host_facts_of_this_machine() -> None:
    host = manifest.host_info()
    assert host["cpus"] == os.cpu_count() and host["kernel"] == os.uname().release
    # MemTotal is the kernel's total RAM: sysconf reads the same figure another way
    assert host["memory_bytes"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_clock_and_lab_sections() -> None:
    local = new("r", scenario("local", 5), (), clock=clock_info("local", 5))
    zero = {"offset_ms": 0.0, "bound_ms": 0.0, "rtt_ms": 0.0}
    assert local["clock"] == {
        "method": "one host",
        "wall_clock": "time.time_ns",
        "hosts": {"local": {"before": zero, "after": zero, "drift_ms": 0.0}},
        "bound_ms": 0.0,
        "budget_ms": 5.0,
        "within_budget": True,
        "note": "one host: every worker and broker reads the same kernel clock",
    }
    assert local["lab"] == {
        "kind": "local",
        "name": "local",
        "price_per_hour_usd": None,
        "hosts": {"local": {"role": "all", "address": "127.0.0.1"}},
    }
    lab = {"kind": "aws", "name": "eu-3x", "price_per_hour_usd": 1.53, "hosts": {}}
    remote = new("r", scenario("aws"), (), lab=lab, clock=clock_info("aws"))
    assert remote["clock"] == {
        "method": "not measured",
        "wall_clock": "time.time_ns",
        "hosts": {},
        "bound_ms": None,
        "budget_ms": None,
        "within_budget": None,
        "note": "clock offsets between hosts were not measured",
    }
    lab["price_per_hour_usd"] = 99.0  # the caller's dict changes later: the manifest's not
    assert remote["lab"] == {
        "kind": "aws",
        "name": "eu-3x",
        "price_per_hour_usd": 1.53,
        "hosts": {},
    }


def test_nothing_machine_private_in_a_local_manifest() -> None:
    text = json.dumps(new("r", scenario(), ("nats-py",)))
    host = os.uname().nodename
    assert f'"{host}"' not in text and f" {host}" not in text
    assert str(Path.home()) + "/" not in text and str(ROOT) not in text
    user = os.environ.get("USER") or os.environ.get("LOGNAME")
    if user and user != "root":
        assert f'"{user}"' not in text


def test_a_field_not_known_yet_is_left_out_and_a_known_none_is_kept() -> None:
    m = manifest.base_manifest("r", scenario(), ())
    assert "stand_in" not in m.to_json()["broker"] and "cpu" not in m.to_json()
    assert "nodes_at" not in m.to_json()["cluster"]
    m.broker.stand_in = None  # an attached cluster: no stand-in, and said so
    m.cpu = {"brokers_recorded": False, "why": "broker processes on other hosts"}
    assert m.to_json()["broker"]["stand_in"] is None and m.to_json()["cpu"]["why"]
