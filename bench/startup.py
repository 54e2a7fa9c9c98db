"""Benchmark: time to a healthy local 3-node cluster, per broker, against its goal.

For each broker: mqlab's own launcher (``mqlab.brokers``, as ``mqlab cluster up`` and the
tests start it) brings up a 3-node cluster on loopback; the time is from ``start()`` to
its return, which is when the launcher's health check passed (replication proven, not
just open ports). The cluster is then stopped (that time is shown too). The launcher's
progress messages mark its phases: each phase is the time from one message to the next,
so a cluster that misses its goal shows where the time went. The reference is the goal
(the ratio is measured / goal; <= 1 meets it).

    .venv/bin/python bench/startup.py [--brokers nats,postgres,redis,rabbitmq] [--repeat 1]

A broker written ``BROKER@PROFILE`` is started as that profile asks its servers to be
(``LocalCluster.server_config``: RocketMQ's controller mode for ``rocketmq@rocketmq-async``
or ``rocketmq@rocketmq-syncflush``), against the broker's goal.

Goals (issue 13): NATS < 2 s, PostgreSQL < 5 s, Redis < 2 s, RabbitMQ < 40 s; (issue 26)
Kafka < 60 s (3 JVMs, storage formatted first, on 2 cores), RocketMQ < 60 s (five JVMs:
name server, 3 DLedger brokers, the proxy once one leads). Issue 26 asks only that
Pulsar's time be printed (1 ZooKeeper, 3 bookies, 3 brokers, 7 JVMs); its 120 s mark is
this script's, not an issue's goal.
ActiveMQ Artemis < 60 s (3 instances + a 3-node ZooKeeper).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mqlab.brokers.local import cluster_class
from mqlab.errors import MqlabError, ScenarioError
from mqlab.scenario.load import load_profile

PROFILES = Path(__file__).resolve().parents[1] / "scenarios" / "profiles"

ELAPSED = re.compile(r" \(\d+ s\)$")  # a progress message's own elapsed-time suffix
GOALS_S = {
    "nats": 2.0,
    "postgres": 5.0,
    "redis": 2.0,
    "rabbitmq": 40.0,
    "kafka": 60.0,
    "rocketmq": 60.0,
    "pulsar": 120.0,
    # Artemis's 3 instances (bin/artemis create each) and its 3-node ZooKeeper, all JVMs,
    # healthy once the backup is in sync with the primary
    "artemis": 60.0,
}
DEFAULT = tuple(GOALS_S)  # every cluster unless --brokers names some


@dataclass
class Startup:
    broker: str  # the broker, or BROKER@PROFILE
    healthy_s: float = 0.0
    stop_s: float = 0.0
    events: list[tuple[float, str]] = field(default_factory=list)  # (s since start, message)

    @property
    def goal_s(self) -> float:
        return GOALS_S[self.broker.split("@")[0]]

    @property
    def ratio(self) -> float:
        return self.healthy_s / self.goal_s


def phases(events: Sequence[tuple[float, str]], end_s: float) -> list[tuple[str, float]]:
    """(phase, seconds): from the start to the first message ("preparing"), then from
    each progress message to the next, the last one until ``end_s`` (healthy); messages
    that differ only in their elapsed-time suffix (`` (5 s)``) are one phase."""
    out: list[tuple[str, float]] = []
    prev_t, prev_msg = 0.0, "preparing (ports, configuration, data directories)"
    for t, msg in [*events, (end_s, "")]:
        if out and out[-1][0] == prev_msg:  # "waiting ... (5 s)", "(10 s)": one phase
            out[-1] = (prev_msg, out[-1][1] + t - prev_t)
        else:
            out.append((prev_msg, t - prev_t))
        prev_t, prev_msg = t, ELAPSED.sub("", msg)
    return out


def server_of(entry: str) -> tuple[str, dict[str, object]]:
    """``BROKER`` or ``BROKER@PROFILE``: the broker and the server configuration the
    profile (``scenarios/profiles/PROFILE.toml``) asks for."""
    broker, _, profile = entry.partition("@")
    if not profile:
        return broker, {}
    p = load_profile(PROFILES / f"{profile}.toml")
    if p.broker != broker:
        raise ScenarioError(
            PROFILES / f"{profile}.toml", "broker", f"not {broker}", f"use a {broker} profile"
        )
    return broker, cluster_class(broker).server_config(p.settings)


def measure(entry: str, workdir: Path) -> Startup:
    res = Startup(entry)
    broker, server = server_of(entry)
    cluster = cluster_class(broker)(workdir / entry.replace("@", "-"), server=server)
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        res.events.append((time.monotonic() - t0, msg))

    try:
        cluster.start(progress)
        res.healthy_s = time.monotonic() - t0
    finally:
        t1 = time.monotonic()
        cluster.stop()
        res.stop_s = time.monotonic() - t1
    return res


def format_results(results: Sequence[Startup], show_phases: bool = True) -> str:
    head = f"{'broker':30}{'healthy':>9}{'goal':>7}{'ratio':>7}  {'verdict':9}{'stop':>6}"
    lines = [head, "-" * len(head)]
    for r in results:
        verdict = "met" if r.healthy_s < r.goal_s else "NOT met"
        lines.append(
            f"{r.broker:30}{r.healthy_s:8.2f}s{r.goal_s:6.0f}s{r.ratio:7.2f}  {verdict:9}"
            f"{r.stop_s:5.1f}s"
        )
    if show_phases:
        for r in results:
            lines.append(f"\n{r.broker} phases (launcher progress messages):")
            for msg, s in phases(r.events, r.healthy_s):
                lines.append(f"  {s:6.2f} s  {msg}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--brokers", default=",".join(DEFAULT), help="comma-separated")
    ap.add_argument("--repeat", type=int, default=1, help="start each cluster this many times")
    ap.add_argument("--no-phases", action="store_true", help="only the table")
    args = ap.parse_args(argv)
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    unknown = sorted({b.split("@")[0] for b in brokers} - set(GOALS_S))
    if unknown:
        print(f"error: unknown broker(s) {unknown}: one of {sorted(GOALS_S)}", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="mqlab-bench-startup-"))
    results: list[Startup] = []
    try:
        for _ in range(args.repeat):
            for broker in brokers:
                print(f"{broker}: starting a local 3-node cluster", flush=True)
                results.append(measure(broker, workdir))
    except MqlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print("time from LocalCluster.start() to healthy (its return), 3 nodes on 127.0.0.1")
    print(format_results(results, not args.no_phases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
