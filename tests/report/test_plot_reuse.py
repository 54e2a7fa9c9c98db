"""A run's plots carry the digest of what they were drawn from; the site copies a run's
own plots when that digest is the one of the tables it reads, and draws them otherwise.
The committed runs' plots are all current: the site of results/ draws none again."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from mqlab.analysis import catalog
from mqlab.report import plots
from mqlab.report.markdown import _manifest_faults
from tests.fixtures.committed import committed_runs

REPO = Path(__file__).resolve().parents[2]
A_RUN = REPO / "results" / "2026-11-26T17-28-21Z_rocketmq-short_rocketmq-sync_2t-1s-1r"


def tables(run_dir: Path) -> tuple[dict[str, Any], list[Any], list[Any], list[Any]]:
    run = catalog.read_run_table(run_dir, "runs").to_pylist()[0]
    latency = catalog.read_run_table(run_dir, "latency").to_pylist()
    timeline = catalog.read_run_table(run_dir, "timeline").to_pylist()
    return run, latency, timeline, _manifest_faults(run_dir)


def no_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    def drawn(*_a: Any, **_k: Any) -> None:
        raise AssertionError("drawn again")

    monkeypatch.setattr(plots, "plot_timeline", drawn)
    monkeypatch.setattr(plots, "plot_latency_distribution", drawn)


def test_plots_drawn_from_the_same_inputs_are_copied_not_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, latency, timeline, faults = tables(A_RUN)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    names = plots.plot_run(run, latency, timeline, first, faults)
    assert names == [plots.TIMELINE_PNG, plots.PERCENTILES_PNG]
    digest = plots.inputs_digest(run, plots.overall_histograms(latency), timeline, faults)
    for name in names:
        assert plots.png_text(first / name)[plots.INPUTS_KEY] == digest

    with monkeypatch.context() as m:
        no_drawing(m)
        again = plots.plot_run(
            dict(run, run_dir="elsewhere"), latency, timeline, second, faults, reuse_from=first
        )
    assert again == names
    for name in names:
        assert (second / name).read_bytes() == (first / name).read_bytes()


@pytest.mark.parametrize("change", ["timeline", "latency", "faults", "run", "drawing"])
def test_plots_whose_inputs_changed_are_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    run, latency, timeline, faults = tables(A_RUN)
    old = tmp_path / "old"
    old.mkdir()
    plots.plot_run(run, latency, timeline, old, faults)
    run, latency, timeline, faults = copy.deepcopy((run, latency, timeline, faults))
    if change == "timeline":
        timeline[3]["received"] += 1
    elif change == "latency":
        whole = [r for r in latency if r["window_index"] is None and r["count"]]
        whole[0]["histogram"] = next(
            r["histogram"] for r in latency if r["window_index"] is not None and r["count"]
        )
    elif change == "faults":
        faults = [{"action": "kill_node", "node": 0, "at_ms": run["measure_start_ms"] + 500}]
    elif change == "run":
        run["warmup_end_ms"] += 1000
    else:
        monkeypatch.setattr(plots, "DRAWING_VERSION", plots.DRAWING_VERSION + "-next")
    new = tmp_path / "new"
    new.mkdir()
    plots.plot_run(run, latency, timeline, new, faults, reuse_from=old)
    digest = plots.inputs_digest(run, plots.overall_histograms(latency), timeline, faults)
    for name in (plots.TIMELINE_PNG, plots.PERCENTILES_PNG):
        assert plots.png_text(old / name)[plots.INPUTS_KEY] != digest
        assert plots.png_text(new / name)[plots.INPUTS_KEY] == digest  # drawn here


@pytest.mark.parametrize("found", ["none", "no digest", "not a png", "truncated"])
def test_a_plot_without_a_digest_or_unreadable_is_drawn_again(tmp_path: Path, found: str) -> None:
    run, latency, timeline, faults = tables(A_RUN)
    old = tmp_path / "old"
    old.mkdir()
    plots.plot_run(run, latency, timeline, old, faults)
    png = old / plots.TIMELINE_PNG
    if found == "none":
        png.unlink()
    elif found == "no digest":
        plots.plot_timeline(
            timeline, png, run["measure_start_ms"], run["warmup_end_ms"], "t", faults=faults
        )
        assert plots.INPUTS_KEY not in plots.png_text(png)
    elif found == "not a png":
        png.write_text("not a png")
    else:
        png.write_bytes(png.read_bytes()[:20])
    new = tmp_path / "new"
    new.mkdir()
    plots.plot_run(run, latency, timeline, new, faults, reuse_from=old)
    digest = plots.inputs_digest(run, plots.overall_histograms(latency), timeline, faults)
    assert plots.png_text(new / plots.TIMELINE_PNG)[plots.INPUTS_KEY] == digest


def test_every_committed_runs_plots_are_drawn_from_its_summary_as_it_is() -> None:
    """`mqlab report` drew each committed run's plots from the tables committed beside
    them: a summary or a drawing changed without the report written again fails here
    (and the site would draw that run again)."""
    stale = []
    runs = [r for r in committed_runs("results/**") if (r / "report.md").is_file()]
    assert len(runs) > 100
    for run_dir in runs:
        run, latency, timeline, faults = tables(run_dir)
        digest = plots.inputs_digest(run, plots.overall_histograms(latency), timeline, faults)
        for name in (plots.TIMELINE_PNG, plots.PERCENTILES_PNG):
            png = run_dir / name
            if png.is_file() and plots.png_text(png).get(plots.INPUTS_KEY) != digest:
                stale.append(str(png.relative_to(REPO)))
    assert not stale, f"run `mqlab report` on these runs: {stale}"
