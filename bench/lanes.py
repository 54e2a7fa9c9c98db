"""Closed-loop senders in lanes against a thread per sender: do lanes measure what
independent senders would? (issue 25)

For each broker (local 3-node Redis and PostgreSQL clusters, their default durability
profiles: ``redis-async``, ``postgres-sync``), one mqlab sender worker of N closed-loop
senders (batches of --batch x --message-bytes) runs --duration-s through lanes (all
senders driven from one thread, ``mqlab._sendpath.Lanes``) and through a thread per
sender (each its own set of one), on a plain loopback and on a delayed one: 20 +- 10 ms
on every packet of the loopback of a network namespace made for the bench, where the
clusters and the worker run (tc netem where the kernel has it, else mqlab's NFQUEUE
impairer, as the netns lab's ``netem`` fault does). Needs root for the namespace.

Printed per row: msgs/s, mean and p99 send latency (per batch), and the **effective
concurrency** by Little's law — batches confirmed per second x mean batch latency, over
the worker's whole one-second intervals — which equals the number of senders when no
sender waits on anything but its own batch (less the client's own time between
batches). Goals: with the delayed link, lanes keep it >= 0.97 x N; without, at or above
the thread-per-sender figure.

  .venv/bin/python bench/lanes.py [--brokers redis,postgres] [--senders 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.clients, run as a file
from bench.clients import (  # noqa: E402
    PROFILES,
    BenchError,
    Setup,
    WorkerProcess,
    window_count,
    worker_spec,
)
from mqlab import clock  # noqa: E402
from mqlab.archive import hlog, layout  # noqa: E402
from mqlab.brokers import registry  # noqa: E402
from mqlab.brokers.local import cluster_class  # noqa: E402
from mqlab.errors import MqlabError  # noqa: E402
from mqlab.faults.link import netem_args, no_netem  # noqa: E402
from mqlab.scenario.load import PROJECT_PROFILES, load_profile  # noqa: E402

DELAYED_GOAL = 0.97


@dataclasses.dataclass(frozen=True)
class Row:
    broker: str
    link: str  # "loopback" | "delayed"
    path: str  # "lanes" | "threads"
    senders: int
    msgs_s: float
    batches_s: float
    mean_ms: float
    p99_ms: float

    @property
    def concurrency(self) -> float:
        """Little's law: batches in flight on average = arrival rate x time in system."""
        return self.batches_s * self.mean_ms / 1000


def window_latency(path: Path, lo_ms: int, hi_ms: int) -> tuple[int, float, float]:
    """(batches, mean ms, p99 ms) of the send_call_us intervals wholly in [lo_ms, hi_ms]."""
    lines, problem = hlog.read_lines(str(path))
    if lines is None:
        raise BenchError(f"{path}: {problem}")
    acc = None
    for item in hlog.parse_log(str(path), lines):
        if isinstance(item, hlog.Interval) and item.start_ms >= lo_ms and item.end_ms <= hi_ms:
            acc = hlog.merge_into(acc, hlog.decode(item.payload))
    if acc is None or acc.get_total_count() == 0:
        raise BenchError(f"{path}: no batch confirmed in the window")
    return (
        int(acc.get_total_count()),
        acc.get_mean_value() / 1000,
        acc.get_value_at_percentile(99) / 1000,
    )


def measure(broker: str, path: str, link: str, s: Setup, driver: Any, profile: Any) -> Row:
    tag = f"{broker}-{path}-{uuid.uuid4().hex[:6]}"
    spec = worker_spec("sender", driver, profile, s, s.workdir / tag)
    spec = dataclasses.replace(spec, lanes=path == "lanes")
    worker = WorkerProcess(spec, s.workdir)
    try:
        worker.wait_for("ready")
        lo_ms = clock.wall_ms()
        worker.command("go")
        time.sleep(s.duration_s)
        hi_ms = clock.wall_ms()
        worker.wait_for("done")
    finally:
        worker.close()
    messages, seconds = window_count(worker.counts(), "confirmed", lo_ms, hi_ms)
    if seconds <= 0:
        raise BenchError(f"{broker} {path}: no whole interval in the window (raise --duration-s)")
    batches, mean_ms, p99_ms = window_latency(
        layout.log_file(worker.dir, "send_call_us"), lo_ms, hi_ms
    )
    return Row(
        broker, link, path, s.connections, messages / seconds, batches / seconds, mean_ms, p99_ms
    )


def inside(args: argparse.Namespace) -> list[Row]:
    """The measurements on this network namespace's loopback (as it is)."""
    workdir = Path(tempfile.mkdtemp(prefix="mqlab-bench-lanes-"))
    s = Setup(args.duration_s, args.message_bytes, args.batch, args.senders, None, workdir)
    rows: list[Row] = []
    try:
        for broker in args.brokers.split(","):
            profile = load_profile(PROJECT_PROFILES / f"{PROFILES[broker]}.toml")
            cluster = cluster_class(broker)(workdir / f"cluster-{broker}")
            cluster.start()
            try:
                cls = registry.driver_class(broker)
                for path in ("threads", "lanes"):
                    driver = cls(profile.settings, cluster.endpoints(), f"lanes_{path}")
                    driver.setup()
                    try:
                        rows.append(measure(broker, path, args.link, s, driver, profile))
                    finally:
                        driver.teardown()
                        driver.close()
            finally:
                cluster.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def in_namespace(args: argparse.Namespace, delayed: bool) -> list[Row]:
    """This script, ``--inside``, in a network namespace of its own; ``delayed``: its
    loopback impaired by --delay-ms and --jitter-ms, with ``tc`` netem where the kernel has
    it, else with mqlab's NFQUEUE impairer (``python -m mqlab.faults.impairer``, as the
    netns lab's ``netem`` fault falls back to it). The namespace is removed after."""
    ns = f"mqlab-lanes-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    impairer: subprocess.Popen[str] | None = None
    try:
        run = ["ip", "netns", "exec", ns]
        subprocess.run([*run, "ip", "link", "set", "lo", "up"], check=True, capture_output=True)
        if delayed:
            netem = netem_args(args.delay_ms, args.jitter_ms, 0)
            tc = [*run, "tc", "qdisc", "replace", "dev", "lo", "root", *netem]
            res = subprocess.run(tc, capture_output=True, text=True)
            if res.returncode != 0 and not no_netem(res.stderr):
                raise BenchError(f"{' '.join(tc)}: {res.stderr.strip()}")
            if res.returncode != 0:
                impairer = start_impairer(run, args)
        cmd = [*run, sys.executable, str(Path(__file__).resolve()), "--inside"]
        cmd += ["--link", "delayed" if delayed else "loopback", "--brokers", args.brokers]
        cmd += ["--senders", str(args.senders), "--batch", str(args.batch)]
        cmd += ["--message-bytes", str(args.message_bytes), "--duration-s", str(args.duration_s)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise BenchError(f"inside {ns}: {proc.stderr.strip()[-400:]}")
        return [Row(**r) for r in json.loads(proc.stdout.strip().splitlines()[-1])]
    finally:
        if impairer is not None:
            assert impairer.stdin is not None
            impairer.stdin.close()  # it ends on EOF: its rule removed, packets released
            try:
                impairer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                impairer.kill()
                impairer.wait()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def start_impairer(run: list[str], args: argparse.Namespace) -> subprocess.Popen[str]:
    cmd = [*run, sys.executable, "-m", "mqlab.faults.impairer", "--dev", "lo", "--loopback-here"]
    cmd += ["--queue", "213", "--delay-ms", f"{args.delay_ms:g}"]
    cmd += ["--jitter-ms", f"{args.jitter_ms:g}"]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        err = proc.stderr.read() if proc.stderr is not None else ""
        raise BenchError(f"the NFQUEUE impairer did not start: {(line or err).strip()[-300:]}")
    return proc


def format_rows(rows: Sequence[Row]) -> str:
    head = (
        f"{'broker':<9} {'link':<9} {'path':<8} {'msgs/s':>9} {'mean ms':>8} {'p99 ms':>8} "
        f"{'eff. conc.':>10} {'of N':>6}"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(
            f"{r.broker:<9} {r.link:<9} {r.path:<8} {r.msgs_s:>9,.0f} {r.mean_ms:>8.2f} "
            f"{r.p99_ms:>8.2f} {r.concurrency:>10.2f} {r.concurrency / r.senders:>6.3f}"
        )
    return "\n".join(out)


def goals(rows: Sequence[Row]) -> list[str]:
    """One line per broker and link: the goal, the figure and whether it holds."""
    by = {(r.broker, r.link, r.path): r for r in rows}
    out = []
    for broker in dict.fromkeys(r.broker for r in rows):
        lanes = by.get((broker, "delayed", "lanes"))
        if lanes is not None:
            ok = lanes.concurrency >= DELAYED_GOAL * lanes.senders
            out.append(
                f"{broker}, delayed link: lanes keep {lanes.concurrency:.2f} of "
                f"{lanes.senders} in flight (goal >= {DELAYED_GOAL * lanes.senders:.2f}): "
                f"{'met' if ok else 'NOT met'}"
            )
        lanes, threads = (
            by.get((broker, "loopback", "lanes")),
            by.get((broker, "loopback", "threads")),
        )
        if lanes is not None and threads is not None:
            ok = lanes.concurrency >= threads.concurrency
            out.append(
                f"{broker}, loopback: lanes {lanes.concurrency:.2f}, a thread per sender "
                f"{threads.concurrency:.2f} (ratio {lanes.concurrency / threads.concurrency:.3f}; "
                f"goal >= 1): {'met' if ok else 'NOT met'}; msgs/s ratio "
                f"{lanes.msgs_s / threads.msgs_s:.2f}"
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--brokers", default="redis,postgres", help="comma-separated")
    ap.add_argument("--senders", type=int, default=8, help="closed-loop senders (N)")
    ap.add_argument("--batch", type=int, default=10, help="messages per batch")
    ap.add_argument("--message-bytes", type=int, default=1024)
    ap.add_argument("--duration-s", type=float, default=6.0, help="per path and link")
    ap.add_argument("--delay-ms", type=float, default=20.0, help="netem delay of the link")
    ap.add_argument("--jitter-ms", type=float, default=10.0, help="netem jitter of the link")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--link", default="loopback", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        unknown = sorted({b for b in args.brokers.split(",")} - set(PROFILES))
        if unknown:
            raise BenchError(f"--brokers: unknown {unknown}: one of {sorted(PROFILES)}")
        if args.duration_s < 3:
            raise BenchError("--duration-s must be >= 3 (whole one-second intervals are counted)")
        if args.inside:
            print(json.dumps([dataclasses.asdict(r) for r in inside(args)]))
            return 0
        if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
            raise BenchError("needs root, ip and tc (a network namespace with netem)")
        rows = in_namespace(args, False)
        rows += in_namespace(args, True)
    except (BenchError, MqlabError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print()
    print(
        f"lanes bench: local 3-node clusters, {args.senders} closed-loop senders, batches of "
        f"{args.batch} x {args.message_bytes} B, {args.duration_s:g} s per row; delayed: "
        f"{args.delay_ms:g} +- {args.jitter_ms:g} ms on every packet of the loopback"
    )
    print(format_rows(sorted(rows, key=lambda r: (r.broker, r.link, r.path))))
    print("eff. conc.: batches confirmed per second x mean batch latency (Little's law)")
    for line in goals(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
