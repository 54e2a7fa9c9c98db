"""Shared helpers: synthetic archives summarized without Spark (same functions)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from mqlab.results import catalog, partials, runmeta, tables
from mqlab.results.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run


def summarize_locally(
    run_dirs: Sequence[Path], window_s: float = 10.0
) -> list[dict[str, pa.Table]]:
    """The job's steps in one process: tasks -> partials -> tables -> Parquet + catalog."""
    window_ms = round(window_s * 1000)
    metas = [runmeta.read_run(d) for d in run_dirs]
    results = partials.run_locally(t for m in metas for t in runmeta.tasks_for(m, window_ms))
    out = []
    for m in metas:
        tbls = tables.build_tables(m, results, window_ms)
        catalog.write_run_tables(m.run_dir, tbls)
        out.append(tbls)
    if metas:
        catalog.update_catalog(Path(metas[0].run_dir).parent, out)
    return out


@pytest.fixture
def synthetic_run(tmp_path: Path) -> SyntheticRun:
    return write_synthetic_run(
        tmp_path,
        SyntheticSpec(lost_per_sender=2, duplicated_per_sender=3, reordered_per_receiver=4),
    )
