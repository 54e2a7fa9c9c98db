"""Fixed-rate senders in lanes against a thread per sender: does one worker process hold
its schedule? (issue 28 §3)

For each broker (local 3-node Redis and PostgreSQL clusters, their default durability
profiles: ``redis-async``, ``postgres-sync``, on this machine's loopback), one mqlab
sender worker process (``mqlab.workload.worker``, as local runs start it: ticker,
recorder, interval logs) of N fixed-rate senders, each --rate msgs/s in batches of
--batch, runs --duration-s twice: through lanes (all senders driven from one thread,
``mqlab._sendpath.Lanes``, each batch at its slot) and through a thread per sender (each
sending a batch at a time when its ``FixedRate`` schedule says).

The worker runs with its ``SenderStats`` wrapped to note, for every batch, how late it
went after its slot (its **sender lag**: lanes, when its bytes were written, as the
compiled loop records it; a thread, when its schedule handed it to send), the first
second left out (connections warming up). Printed per row: msgs/s confirmed, the
per-batch sender lag p50 / p99 / max, the p99 of its **own** part (from the later of
its slot and the moment its sender could send: a thread, its last confirmation, one
batch in flight; a lane, the confirmation of the batch ``mqlab._sendpath.WINDOW``
before it, its window of batches in flight; the rest waited for the broker's replies),
the worker's own lag figure (the most any sender was behind in an interval, whole ms,
from its counts log) and send latency p99 (from each slot to the confirmation). Goal:
the lanes' sender lag p99 < 1 ms; the thread per sender's figure is the reference,
measured in the same invocation. Batches of 1 message on Redis and 10 on PostgreSQL by
default (8,000 synchronously replicated commits a second are beyond the local
PostgreSQL cluster; 800 are not). The machine is shared: the figures hold for the load
it had.

  .venv/bin/python bench/fixedrate.py [--brokers redis,postgres] [--senders 8]
      [--rate 1000] [--batch N] [--duration-s 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.*, run as a file
from bench.clients import PROFILES, BenchError, Setup, WorkerProcess, worker_spec  # noqa: E402
from bench.lanes import window_latency  # noqa: E402
from mqlab import clock, typed  # noqa: E402
from mqlab.archive import layout  # noqa: E402
from mqlab.brokers import registry  # noqa: E402
from mqlab.brokers.local import cluster_class  # noqa: E402
from mqlab.errors import MqlabError  # noqa: E402
from mqlab.scenario.load import PROJECT_PROFILES, load_profile  # noqa: E402
from mqlab.scenario.model import Workload  # noqa: E402

GOAL_P99_MS = 1.0
BATCH = {"redis": 1, "postgres": 10}  # messages per batch unless --batch says
WARM_S = 1.0  # the first second's batches are left out
# (slot, ns late, ns late of its own) of each batch, written by the worker
LAG_FILE = "bench-lag.npy"


@dataclasses.dataclass(frozen=True)
class Row:
    broker: str
    path: str  # "lanes" | "threads"
    senders: int
    rate: float
    msgs_s: float
    batches: int  # batches whose lag was taken
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    own_p99_ms: float  # the lag not spent waiting for the sender's last batch
    worker_lag_ms: int  # the worker's own figure: most behind in an interval (whole ms)
    send_p99_ms: float
    batch: int = 1  # messages per batch


def lag_worker(spec_path: str, lanes: bool) -> int:
    """``--worker SPEC``: the mqlab worker (``mqlab.workload.worker.main``) with its
    ``SenderStats`` noting each batch's slot and lag; they go to LAG_FILE at the end."""
    from mqlab import _sendpath
    from mqlab.workload import worker
    from mqlab.workload.senderstats import SenderStats

    noted: list[tuple[int, int, int]] = []  # a thread's batches
    runs: list[np.ndarray] = []  # a lane's runs

    class LagStats(SenderStats):
        last_end = 0  # when its last batch was confirmed (monotonic ns)
        last_ends = np.zeros(0, np.int64)  # a lane's: its last WINDOW batches'

        def sending(
            self, n: int, intended_ns: int, seq: int | None = None, wall_ms: int | None = None
        ) -> None:
            if not lanes:  # a thread's batch, handed to send now
                now = time.monotonic_ns()
                noted.append(
                    (intended_ns, now - intended_ns, now - max(intended_ns, self.last_end))
                )
            super().sending(n, intended_ns, seq, wall_ms)

        def confirmed_batch(self, first_seq: int, n: int, call_us: int, wall_ms: int) -> None:
            self.last_end = time.monotonic_ns()
            super().confirmed_batch(first_seq, n, call_us, wall_ms)

        def confirmed_run(
            self,
            first_seq: int,
            sizes: Any,
            done: int,
            records: Any,
            wall_offset_ns: int,
            intended: Any = None,
        ) -> None:
            if intended is not None and done > 0:
                lags, self.last_ends = lane_lags(
                    intended, records, done, self.last_ends, _sendpath.WINDOW
                )
                runs.append(lags)
            super().confirmed_run(first_seq, sizes, done, records, wall_offset_ns, intended)

    worker.SenderStats = LagStats  # type: ignore[misc]
    code = worker.main(["worker", spec_path])
    out = Path(json.loads(Path(spec_path).read_text())["out_dir"]) / LAG_FILE
    runs.append(np.array(noted, dtype=np.int64).reshape(-1, 3))
    np.save(out, np.concatenate(runs))
    return code


def lane_lags(
    slots: Any, records: Any, done: int, last_ends: np.ndarray, window: int
) -> tuple[np.ndarray, np.ndarray]:
    """(slot, lag, own lag) of a lane's ``done`` confirmed batches (slots: each one's;
    records: written at ``records[2i]``, confirmed at ``records[2i+1]``); a batch's own
    lag runs from the later of its slot and the confirmation of the batch ``window``
    before it (its window's room: ``last_ends`` holds the lane's batches' before these,
    oldest first). Also the lane's last ``window`` confirmations."""
    at = np.frombuffer(slots, np.int64, done)
    rec = np.frombuffer(records, np.int64, 2 * done)
    written, ends = rec[::2], rec[1::2]
    every = np.concatenate([np.asarray(last_ends, np.int64), ends])
    room_at = np.arange(done) + len(last_ends) - window  # the batch whose end made room
    room = np.where(room_at >= 0, every[np.maximum(room_at, 0)], np.iinfo(np.int64).min)
    free = np.maximum(at, room)
    return np.stack([at, written - at, written - free], axis=1), every[-window:]


class LagWorkerProcess(WorkerProcess):
    """A WorkerProcess started through :func:`lag_worker`."""

    def __init__(self, spec: Any, workdir: Path):
        self.spec = spec
        self.dir = Path(spec.out_dir)
        self.dir.mkdir(parents=True)
        spec_path = workdir / f"{spec.worker_id}-{uuid.uuid4().hex[:6]}.spec.json"
        spec.write(spec_path)
        self.stderr = open(self.dir / "stderr.log", "wb")  # noqa: SIM115 - closed in close()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(spec_path)]
        if spec.lanes:
            cmd.append("--lanes")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=self.dir,
            text=True,
        )
        self.done = {}


def percentile_ms(late_ns: np.ndarray, q: float) -> float:
    return float(np.percentile(late_ns, q)) / 1e6 if late_ns.size else float("nan")


def measure(broker: str, path: str, args: argparse.Namespace, driver: Any, profile: Any) -> Row:
    workdir = Path(args.workdir)
    batch = args.batch or BATCH[broker]
    s = Setup(args.duration_s, args.message_bytes, batch, args.senders, None, workdir)
    tag = f"{broker}-{path}-{uuid.uuid4().hex[:6]}"
    spec = worker_spec("sender", driver, profile, s, workdir / tag)
    w = typed.build(Workload, spec.workload, Path("bench"), "workload")
    w = dataclasses.replace(w, mode="fixed_rate", rate_per_s=args.rate)
    spec = dataclasses.replace(spec, workload=typed.to_table(w), lanes=path == "lanes")
    worker = LagWorkerProcess(spec, workdir)
    try:
        sent_path = worker.wait_for("ready").get("send_path")
        lo_ms = clock.wall_ms()
        worker.command("go")
        time.sleep(args.duration_s)
        hi_ms = clock.wall_ms()
        worker.wait_for("done")
    finally:
        worker.close()
    if (sent_path == "compiled-lanes") != (path == "lanes"):
        raise BenchError(f"{broker} {path}: the worker sent through {sent_path!r}")
    rows = [r for r in worker.counts() if r.start_ms >= lo_ms + 1000 * WARM_S]
    rows = [r for r in rows if r.start_ms + r.length_ms <= hi_ms]
    seconds = sum(r.length_ms for r in rows) / 1000
    if seconds <= 0:
        raise BenchError(f"{broker} {path}: no whole interval in the window (raise --duration-s)")
    confirmed = sum(r.counts["confirmed"] for r in rows)
    noted = np.load(worker.dir / LAG_FILE)
    if noted.size == 0:
        raise BenchError(f"{broker} {path}: no batch's lag was noted")
    kept = noted[noted[:, 0] >= noted[:, 0].min() + int(WARM_S * 1e9)]
    late = kept[:, 1]
    _, _, send_p99 = window_latency(
        layout.log_file(worker.dir, "send_msg_us"), lo_ms + int(1000 * WARM_S), hi_ms
    )
    return Row(
        broker,
        path,
        args.senders,
        args.rate,
        confirmed / seconds,
        int(late.size),
        percentile_ms(late, 50),
        percentile_ms(late, 99),
        float(late.max()) / 1e6 if late.size else float("nan"),
        percentile_ms(kept[:, 2], 99),
        max((r.lag_ms for r in rows), default=0),
        send_p99,
        batch,
    )


def run_all(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    for broker in args.brokers.split(","):
        profile = load_profile(PROJECT_PROFILES / f"{PROFILES[broker]}.toml")
        cluster = cluster_class(broker)(Path(args.workdir) / f"cluster-{broker}")
        cluster.start()
        try:
            cls = registry.driver_class(broker)
            for path in ("threads", "lanes"):
                driver = cls(profile.settings, cluster.endpoints(), f"fixed_{path}")
                driver.setup()
                try:
                    if not driver.sends_in_lanes():
                        raise BenchError(f"{broker}: no lanes here (mqlab._sendpath not built?)")
                    rows.append(measure(broker, path, args, driver, profile))
                finally:
                    driver.teardown()
                    driver.close()
        finally:
            cluster.stop()
    return rows


def format_rows(rows: Sequence[Row]) -> str:
    head = (
        f"{'broker':<9} {'path':<8} {'batch':>5} {'msgs/s':>8} {'batches':>8} {'lag p50':>8} "
        f"{'lag p99':>8} "
        f"{'lag max':>8} {'own p99':>8} {'worker lag':>10} {'send p99':>9}"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(
            f"{r.broker:<9} {r.path:<8} {r.batch:>5} {r.msgs_s:>8,.0f} {r.batches:>8} "
            f"{r.lag_p50_ms:>8.3f} "
            f"{r.lag_p99_ms:>8.3f} {r.lag_max_ms:>8.2f} {r.own_p99_ms:>8.3f} {r.worker_lag_ms:>10} "
            f"{r.send_p99_ms:>9.2f}"
        )
    return "\n".join(out)


def goals(rows: Sequence[Row]) -> list[str]:
    """One line per broker: the lanes' sender lag p99 against the goal and against the
    thread per sender's."""
    by = {(r.broker, r.path): r for r in rows}
    out = []
    for broker in dict.fromkeys(r.broker for r in rows):
        lanes, threads = by.get((broker, "lanes")), by.get((broker, "threads"))
        if lanes is None:
            continue
        ok = lanes.lag_p99_ms < GOAL_P99_MS
        line = (
            f"{broker}: {lanes.senders} senders x {lanes.rate:,.0f} msgs/s (batches of "
            f"{lanes.batch}) in lanes, sender lag "
            f"p99 {lanes.lag_p99_ms:.3f} ms (goal < {GOAL_P99_MS:g} ms): "
            f"{'met' if ok else 'NOT met'}"
        )
        if threads is not None:
            line += (
                f"; a thread per sender {threads.lag_p99_ms:.3f} ms (ratio lanes/threads "
                f"{lanes.lag_p99_ms / max(threads.lag_p99_ms, 1e-9):.2f})"
            )
        line += f"; own part p99 {lanes.own_p99_ms:.3f} ms"
        if threads is not None:
            line += f" (a thread per sender {threads.own_p99_ms:.3f} ms)"
        out.append(line)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--brokers", default="redis,postgres", help="comma-separated")
    ap.add_argument("--senders", type=int, default=8, help="fixed-rate senders (N)")
    ap.add_argument("--rate", type=float, default=1000.0, help="msgs/s per sender")
    ap.add_argument(
        "--batch", type=int, default=0, help="messages per batch (default: redis 1, postgres 10)"
    )
    ap.add_argument("--message-bytes", type=int, default=1024)
    ap.add_argument("--duration-s", type=float, default=10.0, help="per path")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--lanes", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return lag_worker(args.worker, args.lanes)
    try:
        unknown = sorted({b for b in args.brokers.split(",")} - {"redis", "postgres"})
        if unknown:
            raise BenchError(f"--brokers: unknown {unknown}: redis, postgres")
        if args.batch < 0:
            raise BenchError("--batch must be >= 1 (or 0: each broker's default)")
        if args.duration_s < 3:
            raise BenchError("--duration-s must be >= 3 (whole one-second intervals are counted)")
        args.workdir = tempfile.mkdtemp(prefix="mqlab-bench-fixedrate-")
        try:
            rows = run_all(args)
        finally:
            shutil.rmtree(args.workdir, ignore_errors=True)
    except (BenchError, MqlabError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print()
    print(
        f"fixed-rate bench: local 3-node clusters, one worker process of {args.senders} "
        f"senders x {args.rate:,.0f} msgs/s, messages of {args.message_bytes} B, "
        f"{args.duration_s:g} s per row (the first {WARM_S:g} s left out)"
    )
    print(format_rows(sorted(rows, key=lambda r: (r.broker, r.path))))
    print(
        "lag: per batch, how late it went after its slot (ms); own: the part after its "
        "sender could send (a thread: its last batch confirmed; a lane: room in its window "
        "of batches in flight), the client's own delay, not the broker's; "
        "worker lag: the worker's own figure, the most any sender was behind in an interval "
        "(whole ms); send p99: per message, slot to confirmation (ms)"
    )
    for line in goals(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
