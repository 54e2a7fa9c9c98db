"""Every .nix file of the project parses (nix-instantiate --parse)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

NIX_FILES = sorted(
    p.relative_to(REPO)
    for p in REPO.rglob("*.nix")
    if not any(part in (".venv", ".git", "node_modules") for part in p.parts)
)


def test_there_are_nix_files() -> None:
    names = {str(p) for p in NIX_FILES}
    assert "flake.nix" in names and "images/base.nix" in names


@pytest.mark.integration
@pytest.mark.parametrize("path", NIX_FILES, ids=str)
def test_parses(path: object) -> None:
    proc = subprocess.run(
        [shutil.which("nix-instantiate") or "nix-instantiate", "--parse", str(REPO / str(path))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
