"""The measured run: from the senders' start until the receivers have drained, with the
scenario's faults applied on the run's clock (:mod:`mqlab.faults.schedule`), each broker
node's CPU recorded where its processes are this machine's, and progress reported."""

from __future__ import annotations

import time

from mqlab import cpu
from mqlab.archive import layout
from mqlab.brokers.cluster import LocalCluster
from mqlab.faults.schedule import Schedule
from mqlab.faults.target import Target
from mqlab.run import receivers, senders
from mqlab.run.context import RunContext
from mqlab.run.drain import Drain
from mqlab.run.workers import totals


def measure(ctx: RunContext) -> str:
    """Start the workers and run; why it ended. A partition or netem still in place when
    it ends (completed, failed, interrupted, crashed) is healed before it returns."""
    assert ctx.cluster is not None
    placement = ctx.placement
    target = Target(
        ctx.cluster,
        ctx.drivers[0],  # faults aimed at "the queue's leader" strike queue 0's
        placement.client_hosts,
        placement.remote,
        placement.kind,
        ctx.manifest.faults,
        ctx.observer.phase,
    )
    schedule = Schedule(ctx.scenario.faults, target)
    broker_cpu = _broker_cpu(ctx, ctx.cluster)
    try:
        return _run(ctx, schedule)
    finally:
        if broker_cpu is not None:
            broker_cpu.stop()
        try:
            schedule.heal_open()
        except KeyboardInterrupt:  # a second Ctrl-C while healing: heal all the same
            schedule.heal_open()
            raise


def _broker_cpu(ctx: RunContext, cluster: LocalCluster) -> cpu.GroupRecorder | None:
    """Record each broker node's CPU per second (``brokers/node-NN/cpu.csv``) where its
    processes are this machine's (started here by mqlab); the manifest's ``cpu`` section
    says whether it was recorded, and why not."""
    hosts = cluster.hosts[: cluster.nodes]
    if cluster.attached or not cluster.procs or not all(h.is_local for h in hosts):
        where = "started by the image" if cluster.attached else "on other hosts"
        ctx.manifest.cpu = {"brokers_recorded": False, "why": f"broker processes {where}"}
        return None
    ctx.manifest.cpu = {
        "brokers_recorded": True,
        "broker_cores": cpu.host_cores(),
        "broker_nodes": sorted(cluster.procs),
    }

    def groups() -> dict[int, int]:
        return {i: rec.pgid for i, rec in dict(cluster.procs).items()}

    return cpu.GroupRecorder(groups, ctx.run_dir / layout.BROKERS).start()


def _run(ctx: RunContext, schedule: Schedule) -> str:
    s = ctx.scenario
    receivers.start(ctx)
    senders.start(ctx)
    senders.go(ctx)
    w = s.workload
    expected = (
        w.messages_per_thread * s.clients.sender_threads * s.clients.sender_nodes
        if w.messages_per_thread
        else None
    )
    drain = Drain(ctx, lambda: schedule.last_done)
    t0 = time.monotonic()
    hard_deadline = t0 + w.max_run_s + 60
    while True:
        now = time.monotonic()
        elapsed = now - t0
        schedule.due(elapsed)
        now_totals = totals(ctx.workers)
        failed = [x for x in ctx.workers if x.done and x.returncode != 0]
        if failed:
            x = failed[0]
            why = "lost connection to its host" if x.returncode == -1 else f"exit {x.returncode}"
            return f"worker_failed: {x.spec.worker_id} on {x.host.name} ({why})"
        drain.step(now)
        if drain.over:
            break
        if time.monotonic() > hard_deadline:
            return "max_run_s exceeded"
        ctx.observer.progress(elapsed, now_totals, expected)
        time.sleep(0.1)
    schedule.finish()
    ctx.observer.progress(time.monotonic() - t0, totals(ctx.workers), expected)
    return "completed"
