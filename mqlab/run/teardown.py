"""Teardown, however the run ended: every worker stopped and its folder fetched back,
the broker asked what it still holds, the run's queues removed, and each client host's
clock offset measured again."""

from __future__ import annotations

import contextlib

from mqlab.run import clocks, workers
from mqlab.run.context import RunContext
from mqlab.run.drain import check_undrained


def teardown(ctx: RunContext) -> bool:
    """Whether it was interrupted (a Ctrl-C while the workers were stopping)."""
    interrupted = False
    try:
        workers.stop_workers(ctx.workers)
    except KeyboardInterrupt:
        workers.stop_workers(ctx.workers, grace_s=2)
        interrupted = True
    workers.fetch_workers(ctx.workers, ctx.observer.phase)
    if ctx.drivers:
        check_undrained(ctx.drivers, ctx.run_dir)
        ctx.observer.phase(
            "teardown: removing the queue"
            if len(ctx.drivers) == 1
            else f"teardown: removing {len(ctx.drivers)} queues"
        )
        for driver in ctx.drivers:
            with contextlib.suppress(Exception):
                driver.teardown()
            with contextlib.suppress(Exception):
                driver.close()
    placement = ctx.placement
    after = clocks.measure(placement, ctx.observer.phase, "after") if ctx.before else {}
    by_role = {
        role: {w.spec.worker_id: w.host.name for w in ctx.workers if w.spec.role == role}
        for role in ("sender", "receiver")
    }
    ctx.manifest.clock = clocks.section(
        ctx.scenario, placement, ctx.before, after, by_role["sender"], by_role["receiver"]
    )
    return interrupted
