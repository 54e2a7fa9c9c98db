"""The worker bundle: a content-addressed, pinned worker environment shipped to client hosts.

Built on the coordinator from ``uv.lock`` and the mqlab wheel:

1. the worker's dependencies are the project dependencies marked ``role = "worker"`` in
   ``nix/python-deps.nix`` (the same list the Nix worker closure uses), closed over
   ``uv.lock`` (exact versions, extras, markers for this platform);
2. ``uv build --wheel`` builds mqlab; ``uv pip install --target site --no-deps`` installs
   the wheel and the pinned distributions into ``site/``;
3. the bundle's hash is the SHA-256 over every file of ``site/`` (path and content,
   byte-compiled caches excluded) plus ``bundle.json`` (Python version, platform, pins).

On a host the bundle lives in ``<remote root>/bundles/<hash>/``: ``site/``, a venv
(``venv/``, made by the host's own ``python3`` with ``site/`` on its path) and
``READY`` (the hash, written last). A host that holds ``READY`` with the hash skips
the upload. Before a run, each host re-hashes its copy (``python -m mqlab.labs.bundle
verify``) and a run refuses a host whose copy does not match.

On Nix hosts (the AMIs) the worker is the flake's ``packages.worker`` closure, copied
with ``nix copy``; see docs/fleet.md (not buildable on a machine without nixpkgs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mqlab.errors import FleetError

LOG = logging.getLogger(__name__)
FORMAT_VERSION = 1
PROJECT = Path(__file__).resolve().parents[2]
IGNORED_DIRS = {"__pycache__"}


@dataclass(frozen=True)
class Bundle:
    hash: str
    dir: Path  # the staged bundle: site/ + bundle.json
    tarball: Path
    python: str  # "3.11"
    pins: tuple[str, ...]

    def remote_dir(self, root: PurePosixPath) -> PurePosixPath:
        return root / "bundles" / self.hash

    def remote_python(self, root: PurePosixPath) -> str:
        return str(self.remote_dir(root) / "venv" / "bin" / "python")


# -- which distributions ---------------------------------------------------------------
def worker_names(deps_nix: Path | None = None) -> list[str]:
    """Project dependencies with ``role = "worker"`` in nix/python-deps.nix."""
    text = (deps_nix or PROJECT / "nix" / "python-deps.nix").read_text()
    return sorted(re.findall(r'^\s*([A-Za-z0-9_.-]+)\s*=\s*\{\s*role\s*=\s*"worker"', text, re.M))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_ok(marker: str | None) -> bool:
    if not marker:
        return True
    from packaging.markers import Marker

    # hosts may run another patch release of the same Python (3.11.2 vs 3.11.7): a
    # dependency any 3.X.y needs goes in (an extra one does no harm)
    m = Marker(marker)
    first_patch = {"python_full_version": "{}.{}.0".format(*sys.version_info[:2])}
    return bool(m.evaluate() or m.evaluate(first_patch))


def pinned_closure(lock_path: Path | None = None, names: list[str] | None = None) -> list[str]:
    """``name==version`` for the worker's dependencies and everything they need, from uv.lock."""
    lock = tomllib.loads((lock_path or PROJECT / "uv.lock").read_text())
    pkgs: dict[str, list[dict[str, Any]]] = {}
    for entry in lock["package"]:
        pkgs.setdefault(_norm(entry["name"]), []).append(entry)
    project = pkgs["mqlab"][0]
    wanted = {_norm(n) for n in (names if names is not None else worker_names())}
    todo: list[tuple[str, str | None, tuple[str, ...]]] = [
        (_norm(d["name"]), d.get("version"), tuple(d.get("extra", ())))
        for d in project.get("dependencies", [])
        if _norm(d["name"]) in wanted and _marker_ok(d.get("marker"))
    ]
    missing = wanted - {n for n, _, _ in todo}
    if missing:
        raise FleetError(f"uv.lock: worker dependencies {sorted(missing)} are not locked for mqlab")
    seen: set[tuple[str, str]] = set()
    out: dict[str, str] = {}
    while todo:
        name, version, extras = todo.pop()
        candidates = [c for c in pkgs.get(name, []) if version in (None, c["version"])]
        if len(candidates) != 1:
            raise FleetError(f"uv.lock: no single locked {name} {version or ''} for this platform")
        p = candidates[0]
        out[name] = p["version"]
        groups = [("", p.get("dependencies", []))]
        groups += [(e, p.get("optional-dependencies", {}).get(e, [])) for e in extras]
        for group, deps in groups:
            key = (name, group)
            if key in seen:
                continue
            seen.add(key)
            for d in deps:
                if _marker_ok(d.get("marker")):
                    todo.append((_norm(d["name"]), d.get("version"), tuple(d.get("extra", ()))))
    return sorted(f"{n}=={v}" for n, v in out.items())


# -- hashing ---------------------------------------------------------------------------
def tree_hash(root: Path) -> str:
    """SHA-256 over the relative path and content of every file (caches excluded)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS)
        for f in sorted(filenames):
            if f.endswith(".pyc"):
                continue
            p = Path(dirpath) / f
            rel = p.relative_to(root).as_posix()
            h.update(rel.encode() + b"\0")
            if p.is_symlink():
                h.update(b"L" + os.readlink(p).encode())
            else:
                with open(p, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
            h.update(b"\0")
    return h.hexdigest()


def bundle_hash(d: Path) -> str:
    """The bundle's hash: ``site/`` and ``bundle.json`` (what every host re-checks)."""
    h = hashlib.sha256()
    h.update(tree_hash(d / "site").encode())
    h.update((d / "bundle.json").read_bytes())
    return h.hexdigest()[:32]


def _source_key() -> str:
    """Inputs of a build: uv.lock, pyproject, the worker role list and mqlab's sources."""
    h = hashlib.sha256()
    for f in ("uv.lock", "pyproject.toml", "nix/python-deps.nix"):
        h.update((PROJECT / f).read_bytes())
    h.update(tree_hash(PROJECT / "mqlab").encode())
    h.update(f"{sys.version_info[:2]}{platform.machine()}".encode())
    return h.hexdigest()[:24]


def _uv() -> list[str]:
    found = shutil.which("uv")
    if found:
        return [found]
    probe = subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True)
    if probe.returncode == 0:
        return [sys.executable, "-m", "uv"]
    raise FleetError("building the worker bundle needs uv (scripts/bootstrap installs it)")


def _uv_run(uv: list[str], args: list[str], what: str) -> None:
    """``uv args`` from uv's cache alone, then, only if the cache lacks something, with
    the package index. A checkout that ``scripts/bootstrap`` set up has every locked
    distribution and the build backend in the cache, so its bundle needs no network."""
    out = None
    for extra in (["--offline"], []):
        out = subprocess.run(
            [*uv, *extra, *args], capture_output=True, text=True, timeout=900, check=False
        )
        if out.returncode == 0:
            return
        if extra:
            LOG.info("worker bundle: %s from uv's cache failed; with the index now", what)
    assert out is not None
    raise FleetError(f"worker bundle: {what} failed: {(out.stderr or out.stdout).strip()[-600:]}")


def build(cache: Path, progress: Any = None) -> Bundle:
    """The bundle for this checkout, built once per source state under ``cache``."""
    key = _source_key()
    staged = cache / f"src-{key}"
    if not (staged / "DONE").is_file():
        if progress:
            progress("building the worker bundle (uv.lock + the mqlab wheel)")
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"src-{key}.", dir=cache))
        try:
            pins = pinned_closure()
            uv = _uv()
            _uv_run(
                uv,
                ["build", "--wheel", "--quiet", "--out-dir", str(tmp / "dist"), str(PROJECT)],
                "uv build",
            )
            wheel = next((tmp / "dist").glob("mqlab-*.whl"))
            (tmp / "requirements.txt").write_text("\n".join(pins) + "\n")
            _uv_run(
                uv,
                [
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",
                    "--link-mode",
                    "copy",
                    "--no-compile",
                    "--python",
                    sys.executable,
                    "--target",
                    str(tmp / "site"),
                    "-r",
                    str(tmp / "requirements.txt"),
                    str(wheel),
                ],
                "uv pip install --target",
            )
            for junk in (tmp / "site" / "bin",):  # console scripts point at this interpreter
                shutil.rmtree(junk, ignore_errors=True)
            meta = {
                "format_version": FORMAT_VERSION,
                "python": f"{sys.version_info.major}.{sys.version_info.minor}",
                "platform": f"{platform.system().lower()}-{platform.machine()}",
                "mqlab_wheel": wheel.name,
                "pins": pins,
            }
            (tmp / "bundle.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
            shutil.rmtree(tmp / "dist")
            digest = bundle_hash(tmp)
            with tarfile.open(tmp / "bundle.tar", "w") as tar:
                tar.add(tmp / "site", "site")
                tar.add(tmp / "bundle.json", "bundle.json")
            (tmp / "HASH").write_text(digest + "\n")
            (tmp / "DONE").write_text("ok\n")
            shutil.rmtree(staged, ignore_errors=True)
            tmp.rename(staged)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    meta = json.loads((staged / "bundle.json").read_text())
    return Bundle(
        hash=(staged / "HASH").read_text().strip(),
        dir=staged,
        tarball=staged / "bundle.tar",
        python=meta["python"],
        pins=tuple(meta["pins"]),
    )


# -- on a host -------------------------------------------------------------------------
def ensure_on(host: Any, bundle: Bundle, progress: Any = None) -> str:
    """Make ``host`` hold the bundle (upload unless present); returns its interpreter path."""
    root = host.root
    d = bundle.remote_dir(root)
    ready = host.run(["cat", str(d / "READY")], check=False)
    if ready.rc == 0 and ready.out.strip() == bundle.hash:
        LOG.info("%s already holds bundle %s", host.name, bundle.hash)
        return bundle.remote_python(root)
    py = host.run(
        ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], check=False
    )
    if py.rc != 0 or py.out.strip() != bundle.python:
        raise FleetError(
            f"{host.name}: the worker bundle needs Python {bundle.python} as python3 on the host "
            f"(found: {py.out.strip() or py.err.strip() or 'none'}); install it, or use Nix hosts"
        )
    if progress:
        progress(f"shipping worker bundle {bundle.hash[:12]} to {host.name}")
    tmp = PurePosixPath(f"{d}.tmp")
    tar = PurePosixPath(f"{d}.tar")
    host.run(["rm", "-rf", str(tmp), str(d)])
    host.put_file(bundle.tarball, tar)
    site_pth = "../../../../site"
    host.run(
        "set -e; "
        f"mkdir -p {tmp}; tar -C {tmp} -xf {tar}; rm -f {tar}; "
        f"python3 -m venv --without-pip {tmp}/venv; "
        f"echo {site_pth} > {tmp}/venv/lib/python{bundle.python}/site-packages/mqlab-bundle.pth; "
        f"mv {tmp} {d}; echo {bundle.hash} > {d}/READY",
        timeout_s=300,
    )
    return bundle.remote_python(root)


def verify_on(host: Any, bundle: Bundle) -> None:
    """The host's copy hashes to the bundle's hash; FleetError otherwise."""
    d = bundle.remote_dir(host.root)
    res = host.run(
        [bundle.remote_python(host.root), "-m", "mqlab.labs.bundle", "verify", str(d)],
        check=False,
        timeout_s=120,
    )
    found = res.out.strip()
    if res.rc != 0 or found != bundle.hash:
        raise FleetError(
            f"{host.name}: worker bundle in {d} does not match: hash "
            f"{found or res.err.strip()[-200:]!r}, expected {bundle.hash} "
            f"(remove {d} and run again to re-ship it)"
        )


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "verify":
        print(bundle_hash(Path(argv[2])))
        return 0
    print("usage: python -m mqlab.labs.bundle verify BUNDLE_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
