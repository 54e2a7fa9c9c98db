"""Receivers first: every receiver process started on its host and ready (connected,
consuming) before any sender starts."""

from __future__ import annotations

from mqlab.run import workers
from mqlab.run.context import RunContext
from mqlab.run.workers import Worker


def start_role(ctx: RunContext, role: str) -> list[Worker]:
    """Spawn every worker process of ``role``; each joins ``ctx.workers`` as it starts,
    so that whatever happens next, it is stopped."""
    assert ctx.cluster is not None
    specs = workers.worker_specs(
        ctx.scenario,
        ctx.run_id,
        ctx.run_dir,
        ctx.placement,
        ctx.cluster.endpoints().to_json(),
        [d.queue for d in ctx.drivers],
        role,
        ctx.before,
        ctx.shape,
    )
    started = []
    for spec, host, remote_dir in specs:
        started.append(workers.spawn(spec, host, ctx.placement, remote_dir, ctx.run_dir))
        ctx.workers.append(started[-1])
    return started


def where(started: list[Worker]) -> str:
    return ", ".join(sorted({w.host.name for w in started}))


def start(ctx: RunContext) -> None:
    s = ctx.scenario
    ctx.shape = workers.client_processes(s, ctx.placement)
    ctx.manifest.clients.processes = ctx.shape
    ctx.receivers = start_role(ctx, "receiver")
    line = workers.shape_line(ctx.shape["receiver"], s.clients.receiver_threads)
    ctx.observer.phase(f"receivers: {line} on {where(ctx.receivers)}")
    workers.wait_ready(ctx.receivers)
    paths = sorted({w.receive_path for w in ctx.receivers if w.receive_path})
    ctx.manifest.clients.receive_paths = paths
