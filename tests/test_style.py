"""The project's own style gates (STYLE.md: ruff for lint and format, mypy for types)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_lint_is_clean() -> None:
    out = run(str(BIN / "ruff"), "check", ".")
    assert out.returncode == 0, out.stdout[-4000:]


def test_ruff_format_is_clean() -> None:
    out = run(str(BIN / "ruff"), "format", "--check", ".")
    assert out.returncode == 0, out.stdout[-4000:]


def test_mypy_is_clean() -> None:
    out = run(str(BIN / "mypy"), "mqlab")
    assert out.returncode == 0, out.stdout[-4000:]
