"""Benchmark: one receiver thread draining a preloaded queue, before and after prefetch.

Issue 13 ("receivers that keep up"): with one round trip to fetch and one to ack per
message, one NATS receiver thread got 359 msg/s while one sender sent 755 msg/s. For
NATS (profile ``nats-r3``) and Redis (profile ``redis-wait1``), on local 3-node
clusters this script starts and stops itself, it preloads N messages of 128 B, then
times ONE receiver thread (receive batch 1 and an ack after each receive, as in the
ordered-stream experiment) until every message was received and acked and the
receiver closed, twice on a fresh queue each:

- before: ``prefetch = 0``, the drivers' code path before prefetch (one fetch or
  XREADGROUP per receive, an ack that waits for the server); it is slow, so it stops
  after ``--before-s`` seconds and its rate counts what it got until then;
- after: the profile as it is, so the driver's default ``prefetch`` (or the values of
  ``--prefetch``, to choose that default).

RocketMQ (profile ``rocketmq-sync``; ``--brokers rocketmq``) has no prefetch: its
before is a batch's acks one AckMessage call at a time, waited for in turn (the driver
before pipelined acks), its after the driver as it is (a batch's acks in one AckMessage
call); give it ``--batch 32`` (what one receive pops at most).

Prints msgs/s before and after and their ratio per broker. The reference is the old
code path measured in the same invocation, on the same clusters.

    .venv/bin/python bench/receivers.py [--messages 20000] [--prefetch 16,64,256,1024]
    .venv/bin/python bench/receivers.py --brokers rocketmq --batch 32 --messages 5000
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from mqlab import envelope
from mqlab.brokers import local, registry
from mqlab.scenario.load import PROJECT_PROFILES, load_profile

PROFILES = {"nats": "nats-r3", "redis": "redis-wait1", "rocketmq": "rocketmq-sync"}
SEND_BATCH = 500  # messages per send() while preloading
# RocketMQ's broker refuses 500 sends at once on this machine ("broker busy, start flow
# control"): a batch's sends are all in flight together
SEND_BATCHES = {"rocketmq": 32}


@dataclasses.dataclass(frozen=True)
class Drained:
    received: int
    seconds: float
    duplicates: int

    @property
    def rate(self) -> float:
        return self.received / self.seconds


def preload(driver: Any, n: int, size: int) -> None:
    pool = envelope.PayloadPool(size, seed=1)
    batch = SEND_BATCHES.get(driver.name, SEND_BATCH)
    s = driver.sender()
    try:
        for seq in range(0, n, batch):
            k = min(batch, n - seq)
            s.send(envelope.encode_batch(0, seq, k, time.time_ns(), pool))
    finally:
        s.close()


class AcksInTurn:
    """A RocketMQ consumer without ``_ack_async``: the receiver acks with ``ack``, one
    call at a time (the driver's acks before they were pipelined)."""

    def __init__(self, consumer: Any):
        self._consumer = consumer

    def receive(self, n: int, invisible_s: int) -> Any:
        return self._consumer.receive(n, invisible_s)

    def ack(self, message: Any) -> None:
        self._consumer.ack(message)

    def shutdown(self) -> None:
        self._consumer.shutdown()


def drain(driver: Any, n: int, batch: int, limit_s: float, before: bool = False) -> Drained:
    """One receiver: receive(batch) and ack until ``n`` came or ``limit_s`` passed."""
    r = driver.receiver()
    if before and driver.name == "rocketmq":  # its acks in turn
        r.consumer = AcksInTurn(r.consumer)
    seen: set[int] = set()
    got = 0
    start = time.monotonic()
    try:
        while got < n and time.monotonic() - start < limit_s:
            deliveries = r.receive(batch, 0.5)
            if deliveries:
                r.ack(deliveries)
            got += len(deliveries)
            seen.update(envelope.decode(d.payload)[1] for d in deliveries)
    finally:
        r.close()  # flushes what the receiver still sends: part of the time
    return Drained(got, time.monotonic() - start, got - len(seen))


def measure(
    broker: str, cluster: Any, settings: Any, args: argparse.Namespace, before: bool
) -> Drained:
    """One drain on a fresh queue: ``before`` is the old code path (``prefetch = 0`` in
    ``settings``, or RocketMQ's acks in turn), limited to ``--before-s``."""
    cls = registry.driver_class(broker)
    driver = cls(settings, cluster.endpoints(), f"bench_rx_{uuid.uuid4().hex[:8]}")
    driver.setup()
    try:
        preload(driver, args.messages, args.size)
        limit_s = args.before_s if before else args.after_s
        return drain(driver, args.messages, args.batch, limit_s, before)
    finally:
        driver.teardown()
        driver.close()


def describe(d: Drained, total: int) -> str:
    part = f"{d.received:,}" if d.received == total else f"{d.received:,} of {total:,}"
    dup = f", {d.duplicates} duplicates" if d.duplicates else ""
    return f"{d.rate:,.0f} msg/s ({part} in {d.seconds:.1f} s{dup})"


def bench(broker: str, root: Path, args: argparse.Namespace) -> list[str]:
    profile = load_profile(PROJECT_PROFILES / f"{PROFILES[broker]}.toml")
    lines = []
    cluster = local.up(broker, root=root)
    if broker == "rocketmq":  # no prefetch: before is acks in turn
        try:
            before = measure(broker, cluster, profile.settings, args, before=True)
            after = measure(broker, cluster, profile.settings, args, before=False)
        finally:
            local.down(broker, root)
        lines.append(
            f"{broker} ({profile.name}): before (acks in turn): {describe(before, args.messages)}"
        )
        lines.append(
            f"{broker} ({profile.name}): after (a batch's acks in one call): "
            f"{describe(after, args.messages)}; ratio {after.rate / before.rate:.1f}x"
        )
        print("\n".join(lines[-2:]), flush=True)
        return lines
    try:
        old = dataclasses.replace(profile.settings, prefetch=0)
        before = measure(broker, cluster, old, args, before=True)
        lines.append(
            f"{broker} ({profile.name}): before (prefetch 0): {describe(before, args.messages)}"
        )
        for prefetch in args.prefetch or [profile.settings.prefetch]:
            settings = dataclasses.replace(profile.settings, prefetch=prefetch)
            after = measure(broker, cluster, settings, args, before=False)
            lines.append(
                f"{broker} ({profile.name}): after (prefetch {prefetch}): "
                f"{describe(after, args.messages)}; ratio {after.rate / before.rate:.1f}x"
            )
            print(lines[-1], flush=True)
    finally:
        local.down(broker, root)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=20_000, help="preloaded per measurement")
    ap.add_argument("--size", type=int, default=128, help="message bytes")
    ap.add_argument("--batch", type=int, default=1, help="receive batch (max per receive)")
    ap.add_argument("--brokers", default="nats,redis")
    ap.add_argument(
        "--prefetch",
        type=lambda s: [int(x) for x in s.split(",")],
        help="prefetch values to measure after (default: the driver's)",
    )
    ap.add_argument("--before-s", type=float, default=12.0, help="longest 'before' drain")
    ap.add_argument("--after-s", type=float, default=60.0, help="longest 'after' drain")
    args = ap.parse_args()
    start = time.monotonic()
    lines = []
    with tempfile.TemporaryDirectory(prefix="mqlab-bench-rx-") as d:
        for broker in args.brokers.split(","):
            lines += bench(broker, Path(d), args)
    print(f"\none receiver thread, receive batch {args.batch}, {args.size} B messages:")
    for line in lines:
        print("  " + line)
    print(f"({time.monotonic() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
