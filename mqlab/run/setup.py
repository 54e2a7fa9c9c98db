"""Set-up: the scenario's faults checked against where the run is, the cluster (reused
or started), the run's queues created through the coordinator's own clients (one driver
per queue), the workers' hosts prepared, and each client host's clock offset measured
before the run."""

from __future__ import annotations

import time

from mqlab.brokers import registry
from mqlab.faults import schedule
from mqlab.faults.target import Where
from mqlab.run import clocks
from mqlab.run.context import RunContext
from mqlab.run.pool import ClusterPool
from mqlab.workload.spec import queue_names


def setup(ctx: RunContext, pool: ClusterPool) -> None:
    s, placement, manifest, observer = ctx.scenario, ctx.placement, ctx.manifest, ctx.observer
    run_id = ctx.run_id
    driver_cls = registry.driver_class(s.broker)
    # every fault against where it would strike, before anything starts
    schedule.check(s.faults, Where(placement.remote, placement.kind))
    cluster, reused = pool.get(s, placement)
    ctx.cluster = cluster
    manifest.cluster.reused = reused
    manifest.cluster.nodes_at = [
        {
            "index": n.index,
            "host": cluster.hosts[n.index].name if n.index < len(cluster.hosts) else None,
            "address": n.host,
            "port": n.port,
        }
        for n in cluster.endpoints().nodes
    ]
    manifest.cluster.brokers_started_by = "image" if cluster.attached else "mqlab"
    manifest.cluster.coordinator_reach = "ssh tunnel" if placement.tunnels else "direct"
    # a local stand-in serves instead of the real system: its runs are marked
    manifest.broker.stand_in = None if cluster.attached else cluster.stand_in
    manifest.broker.server_versions = (
        cluster.attached_versions() if cluster.attached else cluster.server_versions()
    )
    base = "mqlab_" + run_id.split("_")[0].replace("-", "").lower() + f"_{time.time_ns() % 10**6}"
    names = queue_names(base, s.workload.queues)
    manifest.queue_names = names
    # the coordinator's own clients (setup, drain checks, teardown), one per queue:
    # through SSH tunnels where the lab's addresses are private; workers get the
    # addresses
    reach = placement.reachable(cluster.endpoints(), cluster.follows_advertised)
    observer.phase(
        "setup: creating the queue"
        if len(names) == 1
        else f"setup: creating {len(names)} queues ({names[0]} .. {names[-1]})"
    )
    for name in names:
        ctx.drivers.append(driver_cls(s.profile.settings, reach, name))
        ctx.drivers[-1].setup()
    if not manifest.broker.server_versions:
        manifest.broker.server_versions = ctx.drivers[0].server_versions()
    placement.prepare_workers(observer.phase)
    manifest.lab = placement.lab_manifest()
    ctx.before = clocks.measure(placement, observer.phase, "before")
    ctx.save()
