"""The run's archive: its folder (named by time and what it is), the manifest as the run
starts and as it ends, and the in-process summary (``summary.json``, Parquet, the
catalog)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

from mqlab.analysis.job import summarize_run
from mqlab.archive import layout
from mqlab.archive.manifest import Manifest, Measure, base_manifest
from mqlab.brokers import registry
from mqlab.labs.placement import Placement
from mqlab.provenance import flake_provenance
from mqlab.run import clocks, workers
from mqlab.run.context import RunContext
from mqlab.scenario import load as scenario_mod
from mqlab.scenario.model import Scenario


def new_run_dir(results_dir: Path, s: Scenario) -> Path:
    started = dt.datetime.now(dt.UTC)
    base = layout.run_id(started, s.name, s.label)
    d = results_dir / base
    n = 2
    while d.exists():
        d = results_dir / f"{base}-{n}"
        n += 1
    d.mkdir(parents=True)
    return d


def begin(s: Scenario, placement: Placement, run_dir: Path) -> Manifest:
    """The scenario as run (``scenario.toml``) and the manifest as the run starts."""
    (run_dir / "scenario.toml").write_text(scenario_mod.to_toml(s))
    driver_cls = registry.driver_class(s.broker)
    return base_manifest(
        run_dir.name,
        s,
        driver_cls.client_libraries,
        lab=placement.lab_manifest(),
        clock=clocks.clock_info(s.cluster.target, s.cluster.clock_budget_ms),
        flake=flake_provenance(),
    )


def finish(ctx: RunContext, end_reason: str) -> dict[str, Any]:
    """The manifest as the run ended, the archive tidied, and the run's summary."""
    manifest = ctx.manifest
    manifest.ended_at = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    if manifest.measure.start_ms is not None:
        manifest.measure.end_ms = int(time.time() * 1000)
    else:  # nothing measured: an empty, still valid window
        now = int(time.time() * 1000)
        manifest.measure = Measure(start_ms=now, warmup_end_ms=now, end_ms=now)
    manifest.workers = [workers.worker_status(w) for w in ctx.workers]
    ok = end_reason == "completed" and all(x["status"] == "ok" for x in manifest.workers)
    manifest.status = "complete" if ok else "partial"
    manifest.end_reason = end_reason
    ctx.save()
    for w in ctx.workers:
        log = w.dir / "stderr.log"
        if log.is_file() and log.stat().st_size == 0:
            log.unlink()
    for spec_file in (ctx.run_dir / "workers").glob("*.spec.json"):
        spec_file.unlink()
    return summarize_run(ctx.run_dir, results_dir=ctx.results_dir)
