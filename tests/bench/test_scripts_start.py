"""Every benchmark under bench/ starts as the docs run it (``.venv/bin/python bench/X.py``),
from any directory: its imports resolve and its options parse (``--help``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "__init__.py")


def test_there_are_benchmarks() -> None:
    assert {p.name for p in SCRIPTS} >= {"clients.py", "processes.py", "startup.py"}


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_the_benchmark_starts_from_outside_the_repository(script: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.startswith("usage:")
