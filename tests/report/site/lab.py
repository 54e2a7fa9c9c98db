"""A results directory for the site tests: the repository's committed runs (copied), and
tiny synthetic runs written with the archive's own writers (tests/report/archive.py):
one complete, one with unknown delivery figures (a receiver's delivery.json missing), one
not summarized, and one whose manifest cannot be read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mqlab.analysis.job import summarize_run
from mqlab.archive import layout
from tests.fixtures.committed import ROOT as REPO
from tests.fixtures.committed import committed_runs, copy_committed
from tests.report.archive import START_MS, TinyRun, write_tiny_run

BROKEN = "broken-run"
# archive text that must come out escaped: in the scenario's description
HOSTILE = '<script>alert("x")</script> & <b>bold</b>'


def committed_run_ids() -> list[str]:
    """The top-level runs git holds under results/ (not the user's own runs beside them)."""
    return [p.name for p in committed_runs()]


@dataclass
class SiteLab:
    results: Path
    committed: list[str]  # run ids copied from the repository's results/
    complete: TinyRun
    unknowns: TinyRun  # receiver-01's delivery.json missing: delivery figures unknown
    unsummarized: TinyRun
    broken: Path  # manifest.json is not JSON


def write_lab(results: Path) -> SiteLab:
    results.mkdir(parents=True)
    committed = committed_run_ids()
    for run_id in committed:
        # the archive as committed, without anything a local command wrote beside it
        copy_committed(REPO / "results" / run_id, results / run_id)
    complete = write_tiny_run(results)
    unknowns = write_tiny_run(
        results,
        start_ms=START_MS + 60_000,
        threads=3,
        omit=("workers/receiver-01/delivery.json",),
    )
    for r in (complete, unknowns):
        summarize_run(r.run_dir, window_s=2.0)
    scenario = unknowns.run_dir / layout.SCENARIO
    text = scenario.read_text().replace(
        'name = "tiny"\n', f"name = \"tiny\"\ndescription = '{HOSTILE}'\n"
    )
    scenario.write_text(text)
    unsummarized = write_tiny_run(results, start_ms=START_MS + 120_000)
    broken = results / BROKEN
    broken.mkdir()
    (broken / layout.MANIFEST).write_text("{not json")
    return SiteLab(results, committed, complete, unknowns, unsummarized, broken)
