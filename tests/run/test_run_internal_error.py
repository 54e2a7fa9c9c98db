"""A bug inside a run (an exception that is not one of mqlab's errors) must not leave an
archive that claims the run completed."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab.archive.formats import read_json
from mqlab.run import sweep
from mqlab.run.context import Observer
from mqlab.run.pool import ClusterPool
from mqlab.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parents[2]


class _BrokenPool(ClusterPool):
    def get(self, s, placement):  # type: ignore[no-untyped-def]
        raise TypeError("launcher takes 2 positional arguments but 3 were given")


def test_an_internal_error_leaves_a_partial_archive_and_shows(tmp_path: Path) -> None:
    [s] = load_scenario(ROOT / "scenarios" / "quickstart.toml")
    observer = Observer()
    with pytest.raises(TypeError, match="positional arguments"):
        sweep.run_one(s, tmp_path / "results", _BrokenPool(observer), observer)
    [run_dir] = [p.parent for p in (tmp_path / "results").glob("*/manifest.json")]
    manifest = read_json(run_dir / "manifest.json")
    assert manifest["status"] == "partial"
    assert manifest["end_reason"] == (
        "failed: internal error TypeError: launcher takes 2 positional arguments but 3 were given"
    )
    assert read_json(run_dir / "summary.json")["status"] == "partial"
