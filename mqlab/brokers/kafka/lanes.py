"""Kafka receivers in lanes (the driver's ``receive_lanes``): every receiver of a worker
stays a member of the run's consumer group through librdkafka (joining, heartbeats,
rebalances, commits: ``KafkaReceiver``), but librdkafka fetches nothing (every partition
it owns is paused): each receiver fetches its partitions itself, from their leaders, on
connections of its own (``fetch.BrokerConn``), and all of a worker's receivers are driven
from one thread, as Kafka's own consumer drives its fetches, without a Python object per
message (librdkafka's ``Message``, the ``Delivery``), which cost more client CPU than all
of ConsumerPerformance (docs/development.md).

Each receiver keeps one Fetch in flight per leader (its partitions there, each from its
next offset), long-polling at most the profile's ``fetch_wait_max_ms`` and never past the
call's end. When an answer comes, each partition's record set is read in C
(``mqlab._recvpath.kafka_records``): each message's header cut, the partition's run of
messages recorded as one batch at once (those at or below the partition's delivered
mark flagged redelivered) and acked (``OffsetTracker.took_run``: the run's end is the
partition's next offset and what the next commit says), and the next Fetch goes out at
once. Commits stay the receiver's: every ``commit_interval_s``, at a revoke, at close. A
partition revoked while its fetch was in flight is not recorded (its new owner reads it
from the committed offset); an answer for an offset that is no longer the partition's
next is dropped. A run with offsets missing (none of Kafka's, whose log mqlab's producers
never compact; tansu's fetches left records out) is fetched again, ``GAP_RETRIES`` times,
then taken as it is, the partition's commits stopping at the first offset missing
(``OffsetTracker.took_run``). A leader error (NOT_LEADER_OR_FOLLOWER and the like) looks the leaders
up again; OFFSET_OUT_OF_RANGE starts the partition again at its first offset. At the end
(``until_ns``, or ``wake_fd`` readable) no fetch starts and those in flight are awaited:
what the call returns is recorded and acked. A connection to a leader is made without
blocking (a leader that cannot be reached, as in a partition, holds only the partitions
it leads, not the call or the other receivers); one still being made at the call's end
is kept, with its deadline, for the next call. A failed lane (a connection lost, a
leader not reached within ``METADATA_TIMEOUT_S``, an answer malformed or not in time)
stops there with the error; its receiver's connections are dropped and its leaders
looked up again (the next call connects again). Leaders and a partition's first offset
are looked up on a lookup thread (``LOOKUPS``): the partitions that wait for them are
not fetched meanwhile, the others are."""

from __future__ import annotations

import concurrent.futures
import logging
import selectors
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import LaneReceipt, ReceiptTally, Receiver
from mqlab.brokers.kafka import fetch
from mqlab.brokers.kafka.offsets import GAP_RETRIES
from mqlab.brokers.kafka.receiver import KafkaReceiver
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)
PARTITION_MAX_BYTES = 1 << 20  # a partition's part of a fetch answer, at most
FETCH_MAX_BYTES = 16 << 20  # a fetch answer, at most (Kafka's default: 50 MiB)
ANSWER_GRACE_NS = 10_000_000_000  # an answer later than its long poll by this: failed
IDLE_LOOK_NS = 50_000_000  # a receiver with no partition looks again this often
METADATA_TIMEOUT_S = 10.0
# leaders and first offsets are asked of the brokers on these threads (each call up to
# METADATA_TIMEOUT_S), not on the lanes' thread: a broker that does not answer holds only
# the partitions waiting for it
LOOKUPS = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="kafka-lookup")


class _Lane(ReceiptTally):
    """One receiver's part of a call: what it got (its fetches in flight are its
    receiver's connections')."""

    def __init__(self, r: KafkaReceiver, wall_offset_ns: int):
        super().__init__()
        self.r = r
        self.wall_offset_ns = wall_offset_ns

    def fail(self, e: Exception, sel: selectors.BaseSelector) -> None:
        self.error = e if isinstance(e, DriverError) else DriverError(f"kafka: fetch failed: {e}")
        for conn in self.r.conns.values():
            if conn.pending is not None:
                sel.unregister(conn.sock)
            conn.close()
        self.r.conns.clear()
        self.r.leaders.clear()


def receive_lanes(
    receivers: Sequence[Receiver],
    fetch_wait_max_ms: int,
    until_ns: int,
    wall_offset_ns: int,
    wake_fd: int,
) -> list[LaneReceipt]:
    """See the top of the module; a receipt per receiver, in their order."""
    lanes = []
    for r in receivers:
        if not isinstance(r, KafkaReceiver):
            raise TypeError(f"kafka: receive_lanes takes the driver's receivers: {r!r}")
        r.enter_lanes()
        lanes.append(_Lane(r, wall_offset_ns))
    sel = selectors.DefaultSelector()
    try:
        sel.register(wake_fd, selectors.EVENT_READ, None)
        woken = False
        while True:
            now = time.monotonic_ns()
            going = not woken and now < until_ns
            for lane in lanes:
                if going and lane.error is None:
                    _start(lane, sel, fetch_wait_max_ms, until_ns)
                elif not going:
                    _set_aside(lane, sel)
            in_flight = [c for lane in lanes for c in lane.r.conns.values() if c.pending]
            if not in_flight and not going:
                break
            due = min((c.due_ns for c in in_flight), default=until_ns)
            wait_ns = max(0, (min(due, until_ns) if going else due) - now)
            if not in_flight:  # no partition yet: look again soon (a rebalance gives some)
                wait_ns = min(wait_ns, IDLE_LOOK_NS)
            for key, _ in sel.select(wait_ns / 1e9):
                if key.data is None:  # readable until the caller drains it: watched no more
                    woken = True
                    sel.unregister(wake_fd)
                    continue
                lane, conn = key.data
                if conn.connecting:
                    _connected(lane, conn, sel, fetch_wait_max_ms, until_ns)
                else:
                    _answered(lane, conn, sel)
            now = time.monotonic_ns()
            for lane in lanes:
                late = [c for c in lane.r.conns.values() if c.pending and now > c.due_ns]
                if lane.error is None and late:
                    lane.fail(_late(late[0]), sel)
            if not going and now >= until_ns and not in_flight:
                break
    finally:
        sel.close()
        for lane in lanes:  # left by an error: their answers are not read (connect anew)
            for address, conn in list(lane.r.conns.items()):
                if conn.pending is not None:
                    conn.close()
                    del lane.r.conns[address]
    return [lane.receipt() for lane in lanes]


def _leaders(r: KafkaReceiver) -> dict[int, tuple[str, int]]:
    """The leaders of the topic's partitions (librdkafka's metadata: a call to a broker,
    up to ``METADATA_TIMEOUT_S``; made by a lookup thread, never under the lock)."""
    try:
        md = r.c.list_topics(r.topic, timeout=METADATA_TIMEOUT_S)
    except KafkaException as e:
        raise DriverError(f"kafka: no metadata for {r.topic}: {e}") from e
    brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
    topic = md.topics.get(r.topic)
    if topic is None or topic.error is not None:
        raise DriverError(f"kafka: no metadata for {r.topic}: {topic and topic.error}")
    return {p: brokers[m.leader] for p, m in topic.partitions.items() if m.leader in brokers}


def _first_offset(r: KafkaReceiver, p: int) -> int:
    """The partition's first offset (its low watermark: a call to its leader, up to
    ``METADATA_TIMEOUT_S``; made by a lookup thread, never under the lock)."""
    try:
        low, _high = r.c.get_watermark_offsets(
            TopicPartition(r.topic, p), timeout=METADATA_TIMEOUT_S, cached=False
        )
    except KafkaException as e:
        raise DriverError(f"kafka: no offsets of partition {p}: {e}") from e
    return int(low)


def _look_up(r: KafkaReceiver) -> None:
    """What the receiver's partitions lack before they can be fetched: their leaders, and
    the next offset of a partition that has none (neither handed out nor committed: a
    group that never committed reads from the first, auto.offset.reset earliest). Asked
    of the brokers without the lock, written under it for partitions still owned and
    still lacking it (a rebalance may have moved them meanwhile)."""
    with r.lock:
        owned = set(r.owned)
        need_leaders = any(p not in r.leaders for p in owned)
        unplaced = [p for p in sorted(owned) if r.tracker.expected.get(p) is None]
    if r.closing.is_set():
        return
    leaders = _leaders(r) if need_leaders else None
    firsts = {}
    for p in unplaced:
        if r.closing.is_set():  # the receiver closes: no more calls to its consumer
            return
        firsts[p] = _first_offset(r, p)
    with r.lock:
        if leaders is not None:
            r.leaders.update(leaders)
        for p, low in firsts.items():
            if p in r.owned and r.tracker.expected.get(p) is None:
                r.tracker.start(p, low)


def _lookup_started(r: KafkaReceiver) -> None:
    """A lookup for the receiver on the lookup threads, unless one is under way."""
    if r.lookup is None:
        r.lookup = LOOKUPS.submit(_look_up, r)


def _collect_lookup(r: KafkaReceiver) -> None:
    """A lookup that ended is taken off; its error is raised here, once (the lane fails
    with it, as when the lookup was made in the lane itself)."""
    done = r.lookup
    if done is not None and done.done():
        r.lookup = None
        done.result()


def _start(lane: _Lane, sel: selectors.BaseSelector, fetch_wait_max_ms: int, until_ns: int) -> None:
    """A fetch to each leader of the receiver's partitions that has none in flight."""
    r = lane.r
    try:
        _collect_lookup(r)
        with r.lock:
            owned = sorted(r.owned)
            if not owned:
                return
            unknown = [p for p in owned if p not in r.leaders or p not in r.tracker.expected]
            busy = {a for a, c in r.conns.items() if c.pending is not None}
            wanted: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
            for p in owned:
                address, at = r.leaders.get(p), r.tracker.expected.get(p)
                if address is not None and at is not None and address not in busy:
                    wanted[address].append((p, at))
        if unknown:  # looked up on a lookup thread: the known partitions go on meanwhile
            _lookup_started(r)
        left_ms = max(0, (until_ns - time.monotonic_ns()) // 1_000_000)
        wait_ms = int(min(fetch_wait_max_ms, left_ms))
        for address, parts in wanted.items():
            conn = r.conns.get(address)
            if conn is None:
                conn = r.conns[address] = fetch.BrokerConn(*address, METADATA_TIMEOUT_S)
            conn.pending = parts
            if conn.connecting:  # its fetch is sent once it is connected (_connected)
                conn.due_ns = conn.connect_due_ns
                sel.register(conn.sock, selectors.EVENT_WRITE, (lane, conn))
                continue
            _fetch(r, conn, wait_ms)
            sel.register(conn.sock, selectors.EVENT_READ, (lane, conn))
    except (OSError, DriverError) as e:
        lane.fail(e, sel)


def _fetch(r: KafkaReceiver, conn: fetch.BrokerConn, wait_ms: int) -> None:
    """The Fetch of ``conn.pending``, long-polling ``wait_ms``, sent on ``conn``."""
    assert conn.pending is not None
    conn.correlation += 1
    conn.send(
        fetch.fetch_request(
            conn.correlation,
            r.topic.encode(),
            conn.pending,
            wait_ms,
            PARTITION_MAX_BYTES,
            FETCH_MAX_BYTES,
        )
    )
    conn.due_ns = time.monotonic_ns() + wait_ms * 1_000_000 + ANSWER_GRACE_NS


def _connected(
    lane: _Lane,
    conn: fetch.BrokerConn,
    sel: selectors.BaseSelector,
    fetch_wait_max_ms: int,
    until_ns: int,
) -> None:
    """A connection being made became writable: its fetch is sent (its long poll never
    past the call's end), or the lane fails with why it could not connect."""
    if lane.error is not None:
        return
    try:
        conn.connected()
        left_ms = max(0, (until_ns - time.monotonic_ns()) // 1_000_000)
        _fetch(lane.r, conn, int(min(fetch_wait_max_ms, left_ms)))
        sel.modify(conn.sock, selectors.EVENT_READ, (lane, conn))
    except (OSError, DriverError) as e:
        lane.fail(e, sel)


def _late(conn: fetch.BrokerConn) -> DriverError:
    if conn.connecting:
        return DriverError(
            f"kafka: no connection to {conn.address[0]}:{conn.address[1]} "
            f"within {METADATA_TIMEOUT_S:g} s"
        )
    return DriverError(f"kafka: no fetch answer from {conn.address}")


def _set_aside(lane: _Lane, sel: selectors.BaseSelector) -> None:
    """At the call's end, connections still being made: nothing was sent on them, so
    they are not awaited; each is kept for the next call, its connect deadline with it."""
    for conn in lane.r.conns.values():
        if conn.connecting and conn.pending is not None:
            sel.unregister(conn.sock)
            conn.pending = None


def _answered(lane: _Lane, conn: fetch.BrokerConn, sel: selectors.BaseSelector) -> None:
    """Read what came on ``conn``; once its answer is whole, record and ack each
    partition's run."""
    if lane.error is not None:  # failed earlier in this round: its connections are closed
        return
    try:
        answer = conn.read()
        if answer is None:
            return
        sel.unregister(conn.sock)
        asked, conn.pending = dict(conn.pending or []), None
        parts = fetch.parse_answer(answer, conn.correlation)
        recv_ns = time.monotonic_ns() + lane.wall_offset_ns
        with lane.r.lock:
            for data in parts:
                _took(lane, asked, data, recv_ns)
            lane.r._maybe_commit()
    except (OSError, DriverError, ValueError) as e:
        lane.fail(e, sel)


def _took(lane: _Lane, asked: dict[int, int], data: fetch.PartitionData, recv_ns: int) -> None:
    """One partition of an answer (under the receiver's lock)."""
    r, p = lane.r, data.partition
    offset = asked.get(p)
    if offset is None or p not in r.owned or r.tracker.expected.get(p, offset) != offset:
        return  # revoked meanwhile, or moved on: not recorded (fetched again from there)
    if data.error in fetch.LEADER_ERRORS:
        LOG.info(
            "kafka: partition %d: %s; looking its leader up", p, fetch.LEADER_ERRORS[data.error]
        )
        r.leaders.pop(p, None)
        return
    if data.error == fetch.OFFSET_OUT_OF_RANGE:
        LOG.warning("kafka: partition %d: offset %d out of range; from its first on", p, offset)
        r.tracker.forget([p])
        return
    if data.error:
        raise DriverError(f"kafka: fetch of partition {p} failed: error {data.error}")
    mark = r.tracker.marks.get(p, -1)
    hb = envelope.HEADER_BYTES
    records = compiled.recv_module.kafka_records  # type: ignore[union-attr]
    headers, received, short, flagged, end, _first, skipped, hole = records(
        data.records, offset, mark, hb
    )
    if end <= offset:
        return
    if skipped:  # fetched again from the same offset, GAP_RETRIES times, then taken
        tries = r.gap_tries.get((p, offset), 0)
        if tries < GAP_RETRIES:
            r.gap_tries[(p, offset)] = tries + 1
            LOG.warning(
                "kafka: partition %d: %d offsets after %d missing; fetching again",
                p,
                skipped,
                offset,
            )
            return
        LOG.warning(
            "kafka: partition %d: %d offsets after %d not fetched; commits stop at %d",
            p,
            skipped,
            offset,
            hole,
        )
    if received:
        base = len(lane.headers) // hb
        lane.headers += headers
        kept = len(headers) // hb
        if kept:
            lane.recv_ns.append(recv_ns)
            lane.lens.append(kept)
            lane.flagged.extend(range(base, base + flagged))
        lane.received += received
        lane.short += short
        lane.acked += received
    r.tracker.took_run(p, end, end - 1 if received else -1, hole if skipped else -1)


def receives_in_lanes(settings: Any) -> bool:
    """Whether the profile's receivers can fetch in lanes: the reader is built, and the
    producers do not compress (it reads uncompressed batches)."""
    return compiled.recv_module is not None and settings.compression == "none"
