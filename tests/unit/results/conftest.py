"""Shared helpers: synthetic archives summarized without Spark (the same functions)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from mqlab.analysis import catalog, partials, plan, tables
from tests.fixtures.synthetic import SyntheticRun, SyntheticSpec, write_synthetic_run

# every edge case the fixture can write, at once
EDGE_CASES = SyntheticSpec(
    sender_nodes=2,
    sender_threads=3,
    receiver_threads=4,
    stalls=((9.0, 2.5),),
    failed_per_sender=2,
    unsent_per_sender=3,
    lost_per_sender=2,
    undrained_per_sender=3,
    undrained_foreign=1,
    redelivered_per_sender=3,
    cross_delivered_per_sender=2,
    reordered_per_receiver=4,
    foreign_per_receiver=5,
    recovered_per_sender=1,
    unexpected_per_sender=2,
    out_of_range=(("processing_us", 2, 1), ("send_msg_us", 1, 0)),
)


def summarize_locally(
    run_dirs: Sequence[Path], window_s: float = 10.0
) -> list[dict[str, pa.Table]]:
    """The job's steps in one process: tasks -> partials -> tables -> Parquet + catalog."""
    window_ms = round(window_s * 1000)
    metas = [plan.read_run(d) for d in run_dirs]
    results = partials.run_locally(t for m in metas for t in plan.tasks_for(m, window_ms))
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
        SyntheticSpec(lost_per_sender=2, redelivered_per_sender=3, reordered_per_receiver=4),
    )


@pytest.fixture
def edge_run(tmp_path: Path) -> SyntheticRun:
    return write_synthetic_run(tmp_path, EDGE_CASES)
