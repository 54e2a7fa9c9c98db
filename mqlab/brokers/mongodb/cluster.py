"""MongoDB wire protocol: the ``mongoeco`` server (PyPI), one process on 127.0.0.1.

A wire-protocol stand-in, not a MongoDB to benchmark: one process, no replica set, data
in memory (mongoeco's MemoryEngine), so nothing is replicated or journaled. It accepts
write concern ``{w: "majority", j: true}`` as a standalone mongod does (``w`` above 1 is
refused: "requires a replicated host"), and serves ``insert``, ``findAndModify``,
``delete`` and ``count``: enough for the MongoDB driver's contract suite and the short
scenario. Its figures are never MongoDB's; real numbers come from a real 3-member replica
set in the cloud path (profile ``mongodb-r3``). ``nodes`` is always 1; a restarted node
comes back empty.

mongoeco needs Python >= 3.13, mqlab runs on 3.11: at the first start the launcher makes
a venv of a 3.13 interpreter with the pinned packages below (``uv`` if on PATH, else
``venv`` + ``pip``; from PyPI) under ``mqlab.brokers.tools.cache_dir()``, and reuses it
afterwards. The interpreter: ``$MQLAB_PYTHON313`` if set, else ``python3.13`` (to 3.15) on
PATH, else pyenv's (``$PYENV_ROOT`` or ``~/.pyenv``, ``versions/3.13*`` ...).
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from mqlab.brokers import tools
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.cluster import LocalCluster, Progress, _quiet
from mqlab.errors import ClusterError
from mqlab.hosts import process
from mqlab.hosts.process import ProcessRecord

MONGOECO_VERSION = "4.11.0"
#: the stand-in venv's packages, every one pinned (as resolved for mongoeco[wire] 4.11.0)
REQUIREMENTS = (
    f"mongoeco[wire]=={MONGOECO_VERSION}",
    "attrs==26.1.0",
    "cxp==5.0.0",
    "dnspython==2.9.2",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "msgspec==0.22.0",
    "numkong==7.8.6",
    "numpy==2.5.5",
    "pymongo==4.20.0",
    "pyuca==1.2",
    "referencing==0.37.0",
    "rfc8785==0.1.4",
    "rpds-py==2026.9.1",
    "shapely==2.2.0",
    "tqdm==4.70.1",
    "usearch==2.26.6",
)
PYTHON_ENV = "MQLAB_PYTHON313"
MIN_PYTHON = (3, 13)
SERVER_SCRIPT = Path(__file__).with_name("mongoeco_server.py")
INSTALL_TIMEOUT_S = 900.0
PROBE_DB = "mqlab_health"
# the probe must not see the interpreter's environment of mqlab's own 3.11 venv
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")


# -- the Python >= 3.13 interpreter ----------------------------------------------------
def candidate_pythons(env: dict[str, str]) -> list[str]:
    """Interpreters to try, best first: ``$MQLAB_PYTHON313`` alone when set (a choice, not a
    hint), else ``python3.13``..``python3.15`` on PATH, else pyenv's installed versions."""
    if env.get(PYTHON_ENV):
        return [env[PYTHON_ENV]]
    out: list[str] = []
    for minor in (13, 14, 15):
        found = shutil.which(f"python3.{minor}", path=env.get("PATH", ""))
        if found:
            out.append(found)
    home = env.get("HOME") or str(Path.home())
    roots = [env.get("PYENV_ROOT", ""), str(Path(home) / ".pyenv")]
    for root in dict.fromkeys(r for r in roots if r):
        for minor in (13, 14, 15):
            out += sorted(glob.glob(f"{root}/versions/3.{minor}*/bin/python3.{minor}"))
    return list(dict.fromkeys(out))


def python_version(path: str) -> tuple[str, tuple[int, int]] | None:
    """The interpreter at ``path`` as it names itself (a shim resolves to the real one) and
    its ``(major, minor)``, if it runs; else None."""
    try:
        out = subprocess.run(
            [path, "-I", "-c", "import sys; print(*sys.version_info[:2], sys.executable)"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    parts = out.stdout.strip().split(" ", 2)
    if out.returncode != 0 or len(parts) != 3 or not (parts[0] + parts[1]).isdigit():
        return None
    return parts[2] or path, (int(parts[0]), int(parts[1]))


def find_python(env: dict[str, str] | None = None) -> tuple[str, tuple[int, int]]:
    """The interpreter the stand-in runs on, and its version; ClusterError in one line if
    there is none."""
    env = dict(os.environ) if env is None else env
    for path in candidate_pythons(env):
        found = python_version(path)
        if found is not None and found[1] >= MIN_PYTHON:
            return found
        if env.get(PYTHON_ENV):
            reports = f"Python {found[1][0]}.{found[1][1]}" if found else "it does not run"
            raise ClusterError(
                f"mongodb: {PYTHON_ENV}={path} is not a Python >= 3.13 ({reports}); "
                f"point {PYTHON_ENV} at one"
            )
    raise ClusterError(
        "mongodb: the mongoeco stand-in needs a Python >= 3.13 interpreter and none was "
        "found (python3.13-3.15 on PATH, pyenv's versions/3.13*); install one and set "
        f"{PYTHON_ENV} to its path, e.g. {PYTHON_ENV}=/usr/bin/python3.13"
    )


# -- the stand-in's venv ---------------------------------------------------------------
def venv_dir(cache: Path, python: str, version: tuple[int, int]) -> Path:
    """One venv per interpreter and package set: a change of either makes a new one."""
    key = json.dumps([os.path.realpath(python), list(REQUIREMENTS)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return cache / f"mongoeco-{MONGOECO_VERSION}-py{version[0]}.{version[1]}-{digest}"


def install_commands(python: str, venv: Path, uv: str | None) -> list[list[str]]:
    """Make ``venv`` from ``python`` and install the pinned packages: with uv when there is
    one (it never fetches an interpreter: ``UV_PYTHON_DOWNLOADS=never``), else venv + pip."""
    target = str(venv / "bin" / "python")
    if uv:
        return [
            [uv, "venv", "--quiet", "--python", python, str(venv)],
            [uv, "pip", "install", "--quiet", "--python", target, *REQUIREMENTS],
        ]
    return [
        [python, "-m", "venv", str(venv)],
        [target, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *REQUIREMENTS],
    ]


def ensure_venv(progress: Progress = _quiet, env: dict[str, str] | None = None) -> Path:
    """The stand-in venv's interpreter, made on first use (one maker at a time: a lock)."""
    env = dict(os.environ) if env is None else env
    python, version = find_python(env)
    cache = tools.cache_dir(env)
    venv = venv_dir(cache, python, version)
    ready = venv / "mqlab-ready.json"
    target = venv / "bin" / "python"
    if ready.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.is_file():  # another process made it while we waited
            return target
        shutil.rmtree(venv, ignore_errors=True)
        progress(f"installing mongoeco {MONGOECO_VERSION} for Python {version[0]}.{version[1]}")
        uv = tools.venv_bin("uv")
        run_env = {k: v for k, v in env.items() if k not in DROPPED_ENV}
        run_env["UV_PYTHON_DOWNLOADS"] = "never"
        for cmd in install_commands(python, venv, str(uv) if uv else None):
            try:
                out = subprocess.run(
                    cmd,
                    capture_output=True,
                    text=True,
                    env=run_env,
                    timeout=INSTALL_TIMEOUT_S,
                    check=False,
                )
                failed = out.returncode != 0
                why = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            except (OSError, subprocess.SubprocessError) as e:
                failed, why = True, str(e)
            if failed:
                shutil.rmtree(venv, ignore_errors=True)
                raise ClusterError(
                    f"mongodb: cannot install mongoeco {MONGOECO_VERSION} into {venv} "
                    f"({Path(cmd[0]).name} {cmd[1]}: {why}); the first start needs PyPI"
                )
        ready.write_text(json.dumps({"python": python, "requirements": list(REQUIREMENTS)}))
    return target


# -- the launcher ----------------------------------------------------------------------
class MongoCluster(LocalCluster):
    broker = "mongodb"
    stand_in = "mongoeco, a MongoDB wire stand-in (one process, in memory, no replication)"
    runs_on_hosts = False  # on a lab whose images run the brokers: mqlab.brokers.image
    default_nodes = 1
    start_timeout_s = 60.0

    def __init__(
        self, workdir: Any, nodes: int | None = None, hosts: Any = None, server: Any = None
    ):
        if hosts is not None and not all(h.is_local for h in hosts):
            raise ClusterError(
                f"{self.broker}: the mongoeco stand-in runs on this machine only "
                '(set cluster.target = "local")'
            )
        super().__init__(workdir, 1, server=server)

    def _prepare(self, progress: Progress) -> None:
        self.extra["python"] = str(ensure_venv(progress))
        self.ports = {"mongo": process.free_ports(1)}

    def _start_node(self, index: int) -> ProcessRecord:
        env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
        _p, rec = process.spawn(
            [
                self.extra["python"],
                "-I",  # isolated: not the script's folder, no PYTHON* variables, no user site
                str(SERVER_SCRIPT),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            self.workdir / "mongoeco.log",
            env=env,
            cwd=self.workdir,
        )
        return rec

    @property
    def port(self) -> int:
        return int(self.ports["mongo"][0])

    def _wait_healthy(self, deadline: float, progress: Progress) -> None:
        progress("waiting for mongoeco (MongoDB wire stand-in)")
        while time.monotonic() < deadline:
            if not self.alive()[0]:
                raise ClusterError(f"mongoeco exited; see {self.workdir / 'mongoeco.log'}")
            if self.serves():
                return
            time.sleep(0.2)
        raise ClusterError(f"mongoeco not serving after {self.start_timeout_s:.0f} s")

    def serves(self) -> bool:
        """A probe document written (majority, journaled: what the stand-in accepts of the
        profile's write concern), read back and removed."""
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError
        from pymongo.write_concern import WriteConcern

        if not process.port_open("127.0.0.1", self.port):
            return False
        client: Any = MongoClient(
            f"mongodb://127.0.0.1:{self.port}/?directConnection=true",
            serverSelectionTimeoutMS=2000,
            timeoutMS=10_000,
        )
        try:
            probe = client[PROBE_DB].get_collection(
                "probe", write_concern=WriteConcern(w="majority", j=True)
            )
            token = uuid.uuid4().hex
            probe.insert_one({"_id": token})
            found = probe.find_one({"_id": token})
            probe.delete_one({"_id": token})
            return found is not None
        except PyMongoError:
            return False
        finally:
            client.close()

    def health(self) -> dict[str, Any]:
        alive = self.alive()[0]
        ok = alive and self.serves()
        return {
            "healthy": ok,
            "nodes": [{"index": 0, "alive": alive, "serves": ok, "port": self.port}],
        }

    def endpoints(self) -> Endpoints:
        return Endpoints(
            "mongodb",
            (NodeEndpoint(0, "127.0.0.1", self.port),),
            {"server": self.server_versions()[0], "stand_in": True},
        )

    def server_versions(self) -> list[str]:
        return [f"mongoeco {MONGOECO_VERSION} (MongoDB wire stand-in)"]


CLUSTER = MongoCluster
