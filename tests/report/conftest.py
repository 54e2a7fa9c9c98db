"""Summarized tiny runs, shared by the report tests (summarizing takes a second or two)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from mqlab.analysis.job import summarize_run

from .archive import START_MS, TinyRun, write_tiny_run

WINDOW_S = 2.0


@dataclass
class Lab:
    results: Path
    complete: TinyRun  # every file present
    no_delivery: TinyRun  # receiver-01's delivery.json missing; 3 threads


@pytest.fixture(scope="package")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    results = tmp_path_factory.mktemp("report") / "results"
    complete = write_tiny_run(results)
    no_delivery = write_tiny_run(
        results,
        start_ms=START_MS + 60_000,
        threads=3,
        omit=("workers/receiver-01/delivery.json",),
    )
    for r in (complete, no_delivery):
        summarize_run(r.run_dir, window_s=WINDOW_S)
    return Lab(results, complete, no_delivery)
