"""The worker on Nix hosts: the flake's ``packages.<system>.worker`` closure, ``nix copy``-ed.

A client host is a Nix host when it runs NixOS (``/etc/NIXOS``), as the lab's client
image does (``images/client.nix``). For those hosts the coordinator builds the worker
closure from this checkout's ``flake.nix`` and copies it over SSH
(``nix copy --to ssh-ng://…``, with the lab's key and known hosts); a host whose store
already holds the closure is not sent it again (Nix skips valid paths). The bundle's
hash is the store path's hash (Nix's own content address of the closure's inputs);
workers run with the closure's Python (``workerPython``), never a host's own.

When this machine cannot build the closure (no ``nix``, or nixpkgs cannot be fetched,
as on the machine mqlab is developed on), the run ships the ``uv.lock`` bundle
instead (``mqlab.labs.bundle``) and says why. Nothing here has been run against a
real Nix host: the commands are built and checked by unit tests.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mqlab.errors import FleetError

NIX = ["nix", "--extra-experimental-features", "nix-command flakes"]
BUILD_TIMEOUT_S = 3600.0
COPY_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class NixWorker:
    store_path: str  # packages.<system>.worker (the mqlab-worker wrapper)
    python: str  # its workerPython's interpreter, with mqlab and the worker's pins

    @property
    def hash(self) -> str:
        return PurePosixPath(self.store_path).name.split("-", 1)[0]

    def manifest(self) -> dict[str, Any]:
        return {"kind": "nix", "hash": self.hash, "store_path": self.store_path}


def is_nix_host(host: Any) -> bool:
    return bool(host.run(["test", "-e", "/etc/NIXOS"], check=False).rc == 0)


def build(flake: Path, run: Any = subprocess.run) -> tuple[NixWorker | None, str]:
    """Build the worker closure here: (worker, "") or (None, why this machine cannot)."""
    if shutil.which("nix") is None and run is subprocess.run:
        return None, "no nix on this machine"

    def nix(*args: str) -> tuple[int, str, str]:
        try:
            out = run(
                [*NIX, *args], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            return 124, "", f"nix {args[0]} timed out"
        return int(out.returncode), str(out.stdout), str(out.stderr)

    rc, out, err = nix("build", "--no-link", "--json", f"{flake}#worker")
    if rc != 0:
        last = (err.strip().splitlines() or ["no output"])[-1]
        return None, f"nix build {flake.name}#worker failed: {last}"
    try:
        store_path = str(json.loads(out)[0]["outputs"]["out"])
    except (ValueError, LookupError, TypeError):
        return None, f"nix build printed no output path: {out[:200]!r}"
    rc, py, err = nix("eval", "--raw", f"{flake}#worker.workerPython")
    if rc != 0 or not py.startswith("/nix/store/"):
        return None, f"nix eval {flake.name}#worker.workerPython failed: {err.strip()[-200:]}"
    return NixWorker(store_path, f"{py}/bin/python"), ""


def copy_command(worker: NixWorker, host: Any) -> tuple[list[str], dict[str, str]]:
    """``nix copy`` of the closure to ``host`` over SSH as the lab reaches it."""
    opts = ["-p", str(host.port), "-o", "BatchMode=yes"]
    if host.key is not None:
        opts += ["-i", str(host.key), "-o", "IdentitiesOnly=yes"]
    if host.known_hosts is not None:
        opts += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={host.known_hosts}"]
    python_root = str(PurePosixPath(worker.python).parent.parent)
    cmd = [
        *NIX,
        "copy",
        "--to",
        f"ssh-ng://{host.user}@{host.ssh_address}",
        worker.store_path,
        python_root,
    ]
    return cmd, {"NIX_SSHOPTS": shlex.join(opts)}


def ensure_on(host: Any, worker: NixWorker, progress: Any, run: Any = subprocess.run) -> str:
    """Copy the closure to ``host`` unless its store has it; the interpreter to run."""
    if host.run(["nix-store", "--check-validity", worker.store_path], check=False).rc != 0:
        progress(f"nix copy of the worker closure {worker.hash} to {host.name}")
        cmd, env = copy_command(worker, host)
        import os

        try:
            out = run(
                cmd,
                env={**os.environ, **env},
                capture_output=True,
                text=True,
                timeout=COPY_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise FleetError(f"{host.name}: nix copy did not finish") from None
        if out.returncode != 0:
            raise FleetError(f"{host.name}: nix copy failed: {str(out.stderr).strip()[-300:]}")
    res = host.run(["nix-store", "--verify-path", worker.store_path], check=False)
    if res.rc != 0:
        raise FleetError(
            f"{host.name}: the worker closure {worker.store_path} does not verify "
            f"({(res.err or res.out).strip()[-200:]}); remove it and run again"
        )
    return worker.python
