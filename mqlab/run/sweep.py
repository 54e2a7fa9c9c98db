"""The phases of one run: setup → receivers → senders → measure → drain → teardown → archive.

``execute(scenarios)`` runs every sweep point in order, reusing one cluster per
broker and placement for the whole sweep (or the one `mqlab cluster up` left running).

Where things run is one seam (``mqlab.labs.placement``): all on this machine
(``target = "local"``), or broker nodes and workers on hosts of their own reached over
SSH (``netns``, ``ssh``, ``aws``). The phases are the same either way; every worker is
a process attached to the coordinator by stdin/stdout (``mqlab.hosts.host``).

- On hosts of their own, each client host's clock offset to the coordinator is
  measured before and after the run (:mod:`mqlab.run.clocks`); receivers correct
  end-to-end latencies by it and the manifest records offsets and the error bound.
- Receivers start first (:mod:`mqlab.run.receivers`); senders connect, and once every
  worker is ready all senders start on one command (:mod:`mqlab.run.senders`): the
  measured run (:mod:`mqlab.run.measure`) starts there, so imports and connects never
  eat the warm-up.
- After the senders stop, receivers drain (:mod:`mqlab.run.drain`) until the broker
  holds nothing for the queue (every queue of the run, with ``workload.queues`` > 1;
  asked every half second, twice in a row), or until the drain deadline
  (``drain_timeout_s``; by default twice the profile's redelivery timeout + 10 s).
- Then the broker is asked once more what it still holds (``undrained.json``), and
  the run is summarized in process (:mod:`mqlab.run.archive`).

Each worker's folder is fetched back from its host. Ctrl-C, a lost SSH connection, a
failed host or worker still end every worker and leave a valid archive, marked partial.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mqlab.analysis.context import FAILED
from mqlab.errors import MqlabError
from mqlab.labs.placement import Placement, for_scenario
from mqlab.run import archive
from mqlab.run.context import Observer, RunContext, RunResult
from mqlab.run.measure import measure
from mqlab.run.pool import ClusterPool, placement_key
from mqlab.run.setup import setup
from mqlab.run.teardown import teardown
from mqlab.scenario import load as scenario_mod
from mqlab.scenario.model import Scenario
from mqlab.signals import sigterm_as_interrupt

LOG = logging.getLogger(__name__)


def execute(
    scenarios: list[Scenario], results_dir: Path, observer: Observer | None = None
) -> list[RunResult]:
    observer = observer or Observer()
    pool = ClusterPool(observer)
    placements: dict[tuple[str, ...], Placement] = {}
    results = []
    try:
        for s in scenarios:
            key = placement_key(s)
            if key not in placements:
                placements[key] = for_scenario(s, observer.phase)
            results.append(run_one(s, results_dir, pool, observer, placements[key]))
            if results[-1].end_reason == "interrupted":
                break
    finally:
        try:
            pool.close()
        finally:
            for p in placements.values():
                p.close(observer.phase)
    return results


def run_one(
    s: Scenario,
    results_dir: Path,
    pool: ClusterPool,
    observer: Observer,
    placement: Placement | None = None,
) -> RunResult:
    placement = placement or for_scenario(s, observer.phase)
    run_dir = archive.new_run_dir(results_dir, s)
    manifest = archive.begin(s, placement, run_dir)
    ctx = RunContext(s, run_dir, results_dir, placement, observer, manifest)
    ctx.save()
    end_reason = "completed"
    try:
        observer.phase(f"run {ctx.run_id}")
        setup(ctx, pool)
        end_reason = measure(ctx)
    except KeyboardInterrupt:
        end_reason = "interrupted"
    except MqlabError as e:
        end_reason = f"failed: {e}"
        LOG.error("%s", e)
    except Exception as e:  # a bug in mqlab: the archive says the run failed, the traceback shows
        end_reason = f"failed: internal error {type(e).__name__}: {e}"
        raise
    finally:
        if teardown(ctx):
            end_reason = "interrupted"
        summary = archive.finish(ctx, end_reason)
    # a run that broke a requirement of its scenario (workload.order = "strict") is
    # archived like any other; its summary's status says it failed
    status = summary["status"] if summary.get("status") == FAILED else manifest.status
    result = RunResult(s, run_dir, status, end_reason, summary)
    observer.finished(result)
    return result


def execute_files(
    paths: list[Path], results_dir: Path, observer: Observer | None = None
) -> list[RunResult]:
    scenarios = [s for p in paths for s in scenario_mod.load_scenario(p)]
    with sigterm_as_interrupt():
        return execute(scenarios, results_dir, observer)
