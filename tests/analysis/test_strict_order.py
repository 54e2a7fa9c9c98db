"""workload.order = "strict": a run whose receivers got any sender's messages out of order
fails, after it is summarized and archived; the figure is checked against the raw
delivery records (every receiver's delivery.json), read here without mqlab's readers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mqlab import cli
from mqlab.analysis.context import order_problem
from mqlab.analysis.job import summarize_run
from mqlab.run.context import RunResult
from tests.fixtures.summarized import summarize_locally
from tests.fixtures.synthetic import SyntheticSpec, write_synthetic_run


def raw_reordered(run_dir: Path) -> int:
    """Reordered first deliveries over every receiver node, sender and thread, summed
    straight from the delivery.json files."""
    total = 0
    for path in sorted(run_dir.glob("workers/receiver-*/delivery.json")):
        doc = json.loads(path.read_text())
        total += sum(int(s["reordered"]) for s in doc["senders"].values())
    return total


def _run(tmp_path: Path, order: str | None, reordered: int) -> Path:
    extra: dict[str, object] = {} if order is None else {"order": order}
    spec = SyntheticSpec(duration_s=5, reordered_per_receiver=reordered, extra=extra)
    return write_synthetic_run(tmp_path, spec).run_dir


def test_strict_run_with_reorders_fails_and_says_why(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "strict", 3)
    want = raw_reordered(run_dir)
    assert want == 3 * 2  # the fixture: 3 on the first sender of each of 2 receiver nodes
    tbls = summarize_locally([run_dir])[0]
    summary = summarize_run(run_dir)
    assert summary["status"] == "failed"
    assert summary["order"] == {"requirement": "strict", "violations": want}
    line = f"reordered {want} messages under a strict order requirement"
    assert summary["failures"] == [line] == [order_problem(want)]
    run = tbls["runs"].to_pylist()[0]
    assert run["status"] == "failed" and run["order_violations"] == want
    assert run["order_requirement"] == "strict"
    problems = [p["problem"] for p in tbls["problems"].to_pylist()]
    assert line in problems
    # the archive is whole: the summary and every raw file are there
    assert (run_dir / "summary.json").is_file() and raw_reordered(run_dir) == want


def test_strict_run_without_reorders_passes(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "strict", 0)
    assert raw_reordered(run_dir) == 0
    summary = summarize_run(run_dir)
    assert summary["status"] == "complete"
    assert summary["order"] == {"requirement": "strict", "violations": 0}
    assert summary["failures"] == []


@pytest.mark.parametrize("order", ["any", None])
def test_reorders_without_the_requirement_fail_nothing(tmp_path: Path, order: str | None) -> None:
    run_dir = _run(tmp_path, order, 4)
    summary = summarize_run(run_dir)
    assert summary["delivery"]["reordered"] == raw_reordered(run_dir) == 8
    assert summary["status"] == "complete" and summary["failures"] == []
    assert summary["order"] == {"requirement": "any", "violations": None}


def test_strict_run_with_an_unknown_count_is_partial_not_failed(tmp_path: Path) -> None:
    spec = SyntheticSpec(
        duration_s=5,
        reordered_per_receiver=2,
        extra={"order": "strict"},
        omit=("workers/receiver-01/delivery.json",),
    )
    summary = summarize_run(write_synthetic_run(tmp_path, spec).run_dir)
    assert summary["order"]["violations"] is None
    assert summary["status"] == "partial" and summary["failures"] == []


def test_mqlab_run_exits_non_zero_for_a_failed_run_and_names_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _run(tmp_path, "strict", 3)
    summarize_locally([run_dir])
    summary = summarize_run(run_dir)

    class Scn:
        label = "nats-r3_5t-1s-2r"

    result = RunResult(Scn(), run_dir, summary["status"], "completed", summary)  # type: ignore[arg-type]

    def execute_files(*_a: Any, **_k: Any) -> list[RunResult]:
        return [result]

    monkeypatch.setattr("mqlab.run.sweep.execute_files", execute_files)
    res = CliRunner().invoke(cli.main, ["run", "--results", str(tmp_path), "x.toml"])
    assert res.exit_code == 1, res.output
    assert "failed: reordered 6 messages under a strict order requirement." in res.output
    assert run_dir.is_dir()
