"""Runs Debian's nix-bin (2.8) on a copy of the flake, with the stub nixpkgs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FLAKE_FILES = [
    "flake.nix",
    "nix",
    "images",
    "pyproject.toml",
    "uv.lock",
    "mqlab/brokers/servers.lock.json",  # nix/servers.nix pins the JVM servers' files by it
]


def nix_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:  # fail loudly: scripts/bootstrap --test installs nix-bin
        raise RuntimeError(
            f"{name} not on PATH: apt-get install nix-bin (scripts/apt-packages.txt)"
        )
    return path


@dataclass
class NixEnv:
    root: Path
    src: Path
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [nix_tool("nix"), *args], env=self.env, capture_output=True, text=True, timeout=300
        )

    def eval_json(self, attr: str, apply: str | None = None) -> object:
        args = ["eval", "--json", f"path:{self.src}#{attr}"]
        args += ["--override-input", "nixpkgs", f"path:{self.src}/nix/stub-nixpkgs"]
        if apply:
            args += ["--apply", apply]
        proc = self.run(*args)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


def make_env(tmp: Path) -> NixEnv:
    src = tmp / "src"
    src.mkdir(parents=True)
    for name in FLAKE_FILES:
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, src / name)
    (tmp / "home").mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp / "home"),
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "NIX_STATE_DIR": str(tmp / "state"),
        "NIX_LOG_DIR": str(tmp / "log"),
        "NIX_CONFIG": "\n".join(
            [
                "experimental-features = nix-command flakes",
                f"store = {tmp / 'store'}",
                "eval-cache = false",
                "substituters =",
                "sandbox = false",
            ]
        ),
    }
    return NixEnv(tmp, src, env)


@pytest.fixture(scope="module")
def nixenv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixEnv]:
    tmp = tmp_path_factory.mktemp("nixflake")
    env = make_env(tmp)
    yield env
    # the store's files are read-only; make them removable
    subprocess.run(["chmod", "-R", "u+w", str(tmp)], check=False)
    shutil.rmtree(tmp, ignore_errors=True)
