"""Benchmark: one client node's senders as one worker process, and as two.

Issue 13 ("every core of a client node"): Python threads share one interpreter lock, so
a client node's sender threads in one process use about one core whatever their number.
On a local 3-node Redis cluster (mqlab's own launcher, profile ``redis-async``: no WAIT,
so the client, not replication, is what limits), it runs the same closed-loop sender
node twice, the same threads in total, each time on a fresh stream:

- reference: 1 worker process x ``--threads`` threads (``processes_per_node = 1``);
- contender: ``--processes`` worker processes x ``--threads / --processes`` threads each.

The workers are started from the specs a run makes (``mqlab.run.workers.worker_specs``: ids,
sender ids, seeds) and as a local run starts them (``python -m mqlab.workload.worker``);
all start on one ``go``. Each process's rate is its confirmed messages over its whole
one-second intervals within the measured window; a side's msgs/s is the sum over its
processes. Prints msgs/s and client CPU of each side and the ratio contender/reference.

    .venv/bin/python bench/processes.py [--duration-s 8] [--threads 8] [--processes 2]
        [--message-bytes 1024] [--batch 10]

The machine this was written on has 2 cores shared with the 3 Redis servers and their
sentinels: read the ratio as what a second process buys there, not as a core count's.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.clients, run as a file
from bench.clients import BenchError, WorkerProcess, proc_cpu_s, window_count  # noqa: E402
from mqlab import clock
from mqlab.brokers import registry
from mqlab.brokers.cluster import LocalCluster
from mqlab.brokers.local import cluster_class
from mqlab.errors import MqlabError
from mqlab.hosts.local import LocalHost
from mqlab.labs.placement import Placement
from mqlab.run import workers as run
from mqlab.scenario.load import PROJECT_PROFILES, load_profile
from mqlab.scenario.model import Clients, Cluster, Scenario, Workload

PROFILE = "redis-async"


@dataclasses.dataclass(frozen=True)
class Side:
    """One shape of the sender node, measured: its processes' rates and CPU seconds."""

    processes: int
    threads: int  # per process
    rates: tuple[float, ...]  # msgs/s of each process over its whole intervals
    seconds: float  # the measured window's wall time
    cpu_s: float  # the processes' CPU time over the window, together

    @property
    def rate(self) -> float:
        return sum(self.rates)

    @property
    def cores(self) -> float:
        return self.cpu_s / self.seconds if self.seconds > 0 else 0.0

    @property
    def label(self) -> str:
        return f"{self.processes} process(es) x {self.threads} threads"


def scenario(processes: int, threads: int, args: argparse.Namespace) -> Scenario:
    """A one-sender-node scenario of this shape (closed loop, ``--duration-s``)."""
    profile = load_profile(PROJECT_PROFILES / f"{PROFILE}.toml")
    workload = Workload(
        message_bytes=args.message_bytes,
        send_batch_min=args.batch,
        send_batch_max=args.batch,
        receive_batch_max=args.batch,
        duration_s=args.duration_s,
        mode="closed_loop",
    )
    clients = Clients(sender_threads=threads, processes_per_node=processes)
    return Scenario(
        name="bench-processes",
        description="",
        source=PROJECT_PROFILES / f"{PROFILE}.toml",
        broker="redis",
        profile=profile,
        cluster=Cluster(),
        workload=workload,
        clients=clients,
    )


def measure(cluster: LocalCluster, s: Scenario, workdir: Path) -> Side:
    """Start the sender node's processes, send on one ``go`` for ``duration_s``, and
    count each process's confirmed messages over its whole intervals in that window."""
    cls = registry.driver_class("redis")
    driver = cls(s.profile.settings, cluster.endpoints(), f"bench-processes-{uuid.uuid4().hex[:8]}")
    driver.setup()
    here = LocalHost()
    placement = Placement("local", "local", [here] * 3, [here], [here])
    run_dir = workdir / f"p{s.clients.processes_per_node}-{uuid.uuid4().hex[:6]}"
    shape = run.client_processes(s, placement)
    run_dir.mkdir(parents=True)
    endpoints = driver.endpoints.to_json()
    specs = run.worker_specs(
        s, "bench-processes", run_dir, placement, endpoints, driver.queue, "sender", {}, shape
    )
    workers: list[WorkerProcess] = []
    try:
        for spec, _host, _dir in specs:
            workers.append(WorkerProcess(spec, run_dir))
        for w in workers:
            w.wait_for("ready")
        lo_ms = clock.wall_ms()
        t0 = time.monotonic()
        cpu0 = sum(proc_cpu_s(w.proc.pid) for w in workers)
        for w in workers:
            w.command("go")
        time.sleep(s.workload.duration_s)
        cpu1 = sum(proc_cpu_s(w.proc.pid) for w in workers)
        t1, hi_ms = time.monotonic(), clock.wall_ms()
        for w in workers:
            w.wait_for("done")
    finally:
        for w in workers:
            w.close()
        driver.teardown()
        driver.close()
    rates = []
    for w in workers:
        n, seconds = window_count(w.counts(), "confirmed", lo_ms, hi_ms)
        if seconds <= 0:
            raise BenchError(f"{w.spec.worker_id}: no whole interval in the window")
        rates.append(n / seconds)
    threads = s.clients.sender_threads // len(workers)  # the node's, split evenly
    return Side(len(workers), threads, tuple(rates), t1 - t0, cpu1 - cpu0)


def format_result(reference: Side, contender: Side) -> str:
    head = f"{'sender node':34}{'msgs/s':>10}{'per process':>26}{'CPU':>7}"
    out = [head, "-" * len(head)]
    for side in (reference, contender):
        each = " + ".join(f"{r:,.0f}" for r in side.rates)
        out.append(f"{side.label:34}{side.rate:10,.0f}{each:>26}{side.cores:7.2f}")
    ratio = contender.rate / reference.rate if reference.rate else 0.0
    out.append(
        f"ratio {contender.processes}-process / 1-process: {ratio:.2f} "
        f"({contender.rate:,.0f} / {reference.rate:,.0f} msgs/s)"
    )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--duration-s", type=float, default=8.0, help="seconds of sending per side")
    ap.add_argument("--threads", type=int, default=8, help="sender threads in total")
    ap.add_argument("--processes", type=int, default=2, help="worker processes (contender)")
    ap.add_argument("--message-bytes", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=10, help="messages per send")
    args = ap.parse_args(argv)
    try:
        if args.duration_s < 3:
            raise BenchError("--duration-s must be >= 3 (whole one-second intervals are counted)")
        if args.processes < 2 or args.threads % args.processes:
            raise BenchError(
                f"--threads {args.threads} must split evenly over --processes {args.processes} >= 2"
            )
        workdir = Path(tempfile.mkdtemp(prefix="mqlab-bench-processes-"))
        try:
            cluster = cluster_class("redis")(workdir / "cluster-redis")
            print("redis: starting a local 3-node cluster", flush=True)
            cluster.start()
            try:
                reference = measure(cluster, scenario(1, args.threads, args), workdir)
                # the same node: its threads (per node) spread over the processes
                contender = measure(cluster, scenario(args.processes, args.threads, args), workdir)
            finally:
                cluster.stop()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    except (BenchError, MqlabError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print()
    print(
        f"processes bench: local 3-node Redis cluster, profile {PROFILE}, closed loop, "
        f"{args.message_bytes} B messages, batches of {args.batch}, {args.threads} sender "
        f"threads in all, {args.duration_s:g} s per side"
    )
    print(format_result(reference, contender))
    print("CPU: cores the sender processes used together over the window")
    return 0


if __name__ == "__main__":
    sys.exit(main())
