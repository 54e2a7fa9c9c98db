"""A RocketMQ sender and receiver on mqlab's own remoting connections, straight to the
broker group's master, as RocketMQ's own Java clients and benchmark tools reach it (the
protocol: ``remoting.py``). The driver's ``client = "remoting"`` (its default).

- the master: the group that has a broker id 0 in the name servers' cluster info (with
  DLedger, the Raft leader; one broker group, as the launcher and the images run it),
  looked up when a sender or receiver starts and again after a failure, at most once per
  ``LOOKUP_EVERY_S``. A broken connection or a refusal closes the connection, but for
  the refusals of a broker that is still the master (busy, flush or replica timeouts:
  ``remoting.MASTER_STILL``); the next request connects to the master as then listed
  (after a leader change, the new one), and the runner retries what failed. Until a
  master is listed, a send or receive fails at once ("no master").
- a master demoted while its connection still works (a DLedger leader cut off from the
  other brokers, or paused past an election, answers pops as a follower: the same
  messages each time, its offsets never moved): every sender and receiver of a process
  looks at what one ``MasterWatch`` thread last heard from the name servers (asked every
  ``WATCH_EVERY_S``) and, when they listed another master after its connection was made,
  drops it before its next request (``MasterLink.stale``).
- send: the batch in one SEND_BATCH_MESSAGE to the next of the topic's queues in turn
  (each sender starts at a queue of its own), answered once the broker stored it as its
  durability says (DLedger: 2 of the 3 brokers appended it); a code other than SUCCESS,
  no answer within ``send_timeout_s`` or a broken connection fails the batch
  (DriverError). A batch stored by an attempt whose answer was lost is stored again by
  the retry (mqlab counts duplicates).
- receive: one POP_MESSAGE of ``read_ahead`` messages (at most 32) with the invisible
  duration, waiting at most ``timeout_s`` on the broker (long polling) for the first;
  the first ``max_messages`` are handed out, each with its receipt (flagged redelivered
  when the broker delivered it before), the rest by the next receives, with no request,
  until none is left. What was read ahead is hidden from other receivers as what was
  handed out is; a receiver closed with some comes again after the invisible duration.
- ack: every delivery handed out and not acked yet is acked by one BATCH_ACK_MESSAGE (a
  bit per message, as the Java client acks a batch), written at once; its answer is read
  with the next pop's (or at close), not waited for. A refused ack, or one whose
  connection was lost before its answer, is reported by the next ack() (DriverError): its
  messages come again when their invisible duration ends. With no connection (a failed
  one, until the next pop connects again) the acks wait for the next pop's request. A
  delivery this receiver did not hand out, or acked already, is refused (DriverError,
  after acking the others).
- close: the connection is closed; what was handed out and not acked comes again once
  its invisible duration ends.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from mqlab.brokers.base import Delivery, Receiver, Sender
from mqlab.brokers.rocketmq import admin, popping, remoting
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)
LOOKUP_EVERY_S = 1.0  # at most one lookup of the master this often per sender/receiver
WATCH_EVERY_S = 1.0  # how often a process's MasterWatch asks the name servers
MAX_POP = 32  # the broker pops at most 32 messages per request


def find_master(
    namesrvs: list[tuple[str, int]], timeout_s: float
) -> tuple[str, tuple[str, int]] | None:
    """(the group's name, its master's address) as the first name server that answers
    lists a broker id 0; None while none does (an election) or none answers."""
    for ns in namesrvs:
        try:
            groups = admin.cluster_info(ns, timeout_s)
        except DriverError as e:
            LOG.debug("%s", e)
            continue
        for name, addrs in sorted(groups.items()):
            if 0 in addrs:
                host, _, port = addrs[0].rpartition(":")
                return name, (host, int(port))
    return None


class MasterWatch:
    """The master as the name servers last listed it (``heard``: when it asked them,
    monotonic s, and the address), asked every ``WATCH_EVERY_S`` on a daemon thread of
    its own; one per list of name servers in a process, while a :class:`MasterLink` uses
    it."""

    watches: dict[tuple[tuple[str, int], ...], MasterWatch] = {}
    lock = threading.Lock()

    def __init__(self, namesrvs: list[tuple[str, int]], timeout_s: float):
        self.namesrvs = list(namesrvs)
        self.timeout_s = timeout_s
        self.heard: tuple[float, str, tuple[str, int]] | None = None  # asked, group, address
        self.users = 0
        self.stop = threading.Event()

    @classmethod
    def join(cls, namesrvs: list[tuple[str, int]], timeout_s: float) -> MasterWatch:
        key = tuple(namesrvs)
        with cls.lock:
            watch = cls.watches.get(key)
            if watch is None:
                watch = cls.watches[key] = cls(namesrvs, timeout_s)
                name = "rocketmq-master-watch"
                threading.Thread(target=watch.run, name=name, daemon=True).start()
            watch.users += 1
            return watch

    def leave(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users <= 0:
                self.stop.set()
                if self.watches.get(tuple(self.namesrvs)) is self:
                    del self.watches[tuple(self.namesrvs)]

    ask = staticmethod(find_master)  # how it asks (the tests' own)

    def run(self) -> None:
        while not self.stop.is_set():
            asked = time.monotonic()  # what it hears is at least this fresh
            found = self.ask(self.namesrvs, self.timeout_s)
            if found is not None:
                self.heard = (asked, *found)
            self.stop.wait(WATCH_EVERY_S)


class MasterLink:
    """A connection to the broker group's master, made on first use and again after a
    failure (``drop``), the master looked up each time at most once per
    ``LOOKUP_EVERY_S``; ``stale`` once the name servers list another master."""

    def __init__(self, namesrvs: list[tuple[str, int]], timeout_s: float):
        self.namesrvs = namesrvs
        self.timeout_s = timeout_s
        self.conn: remoting.Connection | None = None
        self.broker_name = ""
        self.looked_up_at = -LOOKUP_EVERY_S
        self.lookups = 0
        self.address: tuple[str, int] | None = None
        self.connected_at = 0.0
        self.watch: MasterWatch | None = None  # joined on first use
        self.moved_to: tuple[str, tuple[str, int]] | None = None  # where stale() heard it is

    def stale(self) -> bool:
        """Whether the name servers listed another master after this connection was made
        (its broker demoted): the caller drops it, and the next ``get`` connects to the
        one they list, with no lookup of its own."""
        if self.watch is None:
            self.watch = MasterWatch.join(self.namesrvs, self.timeout_s)
        heard = self.watch.heard
        if self.conn is None or heard is None or heard[0] <= self.connected_at:
            return False
        if heard[2] == self.address:
            return False
        LOG.info(
            "rocketmq: the name servers list %s:%d as the master now, not %s: reconnecting",
            *heard[2],
            self.conn.where(),
        )
        self.moved_to = (heard[1], heard[2])
        return True

    def get(self) -> remoting.Connection:
        if self.conn is not None:
            return self.conn
        if self.moved_to is not None:
            moved, self.moved_to = self.moved_to, None
            return self._connect(*moved)
        now = time.monotonic()
        if now - self.looked_up_at < LOOKUP_EVERY_S:
            raise DriverError("rocketmq: no connection to a master (looked up less than 1 s ago)")
        self.looked_up_at = now
        self.lookups += 1
        found = find_master(self.namesrvs, self.timeout_s)
        if found is None:
            where = ", ".join(f"{h}:{p}" for h, p in self.namesrvs)
            raise DriverError(f"rocketmq: no name server ({where}) lists a master now")
        return self._connect(*found)

    def _connect(self, broker_name: str, address: tuple[str, int]) -> remoting.Connection:
        self.broker_name = broker_name
        self.conn = remoting.Connection(address, self.timeout_s)
        self.address, self.connected_at = address, time.monotonic()
        return self.conn

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        self.drop()
        if self.watch is not None:
            self.watch.leave()
            self.watch = None


class DirectSender(Sender):
    def __init__(self, driver: Any, namesrvs: list[tuple[str, int]]):
        s = driver.settings
        self.topic = driver.topic
        self.queues = s.queues
        self.timeout_s = s.send_timeout_s
        self.link = MasterLink(namesrvs, s.request_timeout_s)
        self.ids = remoting.UniqueIds()
        self.next_queue = int.from_bytes(os.urandom(2), "big") % self.queues

    def send(self, batch: Sequence[bytes]) -> None:
        queue = self.next_queue
        self.next_queue = (queue + 1) % self.queues
        body = remoting.encode_batch(batch, self.ids.take(len(batch)))
        if self.link.stale():
            self.link.drop()
        try:
            conn = self.link.get()
            header = remoting.send_header(self.topic, queue, self.link.broker_name)
            answer = conn.call(remoting.SEND_BATCH_MESSAGE, header, self.timeout_s, body)
        except DriverError as e:
            self.link.drop()
            raise DriverError(f"rocketmq: a batch of {len(batch)} failed: {e}") from e
        if answer.code != remoting.SUCCESS:
            if answer.code not in remoting.MASTER_STILL:
                self.link.drop()
            raise DriverError(
                f"rocketmq: a batch of {len(batch)} refused by {conn.where()} "
                f"(code {answer.code}: {answer.remark})"
            )

    def close(self) -> None:
        self.link.close()


class DirectReceiver(Receiver):
    def __init__(self, driver: Any, namesrvs: list[tuple[str, int]]):
        s = driver.settings
        self.topic = driver.topic
        self.group = driver.group
        self.invisible_ms = int(s.invisible_duration_s * 1000)
        self.margin_s = float(s.request_timeout_s)
        self.link = MasterLink(namesrvs, s.request_timeout_s)
        self.read_ahead = s.read_ahead
        self.ahead: collections.deque[popping.Popped] = collections.deque()  # not handed out
        self.out: Counter[str] = Counter()  # receipts handed out, unacked -> how often
        self.pending: list[popping.Popped] = []  # acked, not written yet
        # acked, not written yet, by receivers in lanes: their batch ack's entries, how many
        self.pending_bits: dict[popping.Checkpoint, int] = {}
        self.pending_count = 0
        self.written: dict[int, int] = {}  # acks written, unanswered: how many messages
        self.failed: list[str] = []  # why written acks failed, for the next ack() to report
        self.lock = threading.Lock()  # the connection: one request and its answer at a time

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        """Up to ``max_messages`` of what the last pop read ahead; when none is left, a
        pop of ``read_ahead`` (at least ``max_messages``, at most 32) whose first
        ``max_messages`` are handed out and the rest kept."""
        want = max(1, max_messages)
        with self.lock:
            if not self.ahead:
                self.ahead.extend(self._pop(min(max(want, self.read_ahead), MAX_POP), timeout_s))
            out: list[Delivery] = []
            ahead, handed = self.ahead, self.out
            while ahead and len(out) < want:
                m = ahead.popleft()
                handed[m.receipt] += 1
                out.append(Delivery(m.body, m, m.redelivered))
        return out

    def _pop(self, n: int, timeout_s: float) -> list[popping.Popped]:
        """One POP_MESSAGE of at most ``n``, the pending acks written before it."""
        poll_ms = max(0, int(timeout_s * 1000))
        header = popping.pop_header(self.group, self.topic, n, self.invisible_ms, poll_ms)
        if self.link.stale():
            self._lost("its broker is no longer the master")
        try:
            conn = self.link.get()
            op = conn.next_opaque()
            conn.write(self._acks(conn) + remoting.frame(remoting.POP_MESSAGE, header, op))
            answer = conn.answer(op, timeout_s + self.margin_s)
        except DriverError as e:
            self._lost()
            raise DriverError(f"rocketmq: receive failed: {e}") from e
        self._answered(conn)
        if answer.code in remoting.NOTHING_POPPED or answer.code == remoting.POLLING_FULL:
            return []
        if answer.code != remoting.SUCCESS:
            if answer.code not in remoting.MASTER_STILL:
                self._lost()
            raise DriverError(
                f"rocketmq: receive refused by {conn.where()} (code {answer.code}: {answer.remark})"
            )
        return popping.popped(answer, self.link.broker_name, self.group)

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Every delivery handed out and not acked yet is acked by one BATCH_ACK_MESSAGE
        written now, its answer read later; the acks of earlier calls that the broker
        refused, or whose connection was lost before it answered, are reported here
        (DriverError; their messages come again)."""
        refused = 0
        taken: list[popping.Popped] = []
        for d in deliveries:
            m = d.handle
            if not isinstance(m, popping.Popped) or self.out[m.receipt] <= 0:
                refused += 1
                continue
            self.out[m.receipt] -= 1  # acked: the same delivery twice is refused
            if not self.out[m.receipt]:
                del self.out[m.receipt]
            taken.append(m)
        with self.lock:
            self.pending += taken
            if (self.pending or self.pending_count) and self.link.conn is not None:
                try:
                    self.link.conn.write(self._acks(self.link.conn))
                except DriverError as e:  # reported by the next ack(); messages come again
                    self._lost(str(e))
            failed, self.failed = self.failed, []
        if failed:
            raise DriverError(
                f"rocketmq: {len(failed)} acks of earlier batches failed (their messages come "
                f"again): {failed[0]}"
            )
        if refused:
            raise DriverError(
                f"rocketmq: {refused} of {len(deliveries)} deliveries were not handed out "
                "by this receiver or were acked already: not acked"
            )

    def _acks(self, conn: remoting.Connection) -> bytes:
        """The pending acks as one request to write on ``conn``; its answer is matched by
        opaque."""
        if not self.pending and not self.pending_count:
            return b""
        op = conn.next_opaque()
        bits = popping.ack_bits(self.pending, into=self.pending_bits)
        body = popping.ack_body(self.link.broker_name, self.group, self.topic, bits)
        self.written[op] = len(self.pending) + self.pending_count
        self.pending, self.pending_bits, self.pending_count = [], {}, 0
        return remoting.frame(remoting.BATCH_ACK_MESSAGE, {}, op, body)

    def pend(self, popped: popping.PoppedHeaders) -> None:
        """A pop's messages, taken by receivers in lanes, acked with the next request."""
        into = self.pending_bits
        for cp, b in popped.bits.items():
            into[cp] = into.get(cp, 0) | b
        self.pending_count += popped.messages

    def _answered(self, conn: remoting.Connection, wait_s: float = 0.0) -> int:
        """The written acks' answers that came (waiting up to ``wait_s`` for the rest):
        how many messages they acked; a refusal is recorded for the next ack() to
        report."""
        acked = 0
        if not self.written:
            return acked
        conn.buffered()
        for op in list(self.written):
            a = conn.early.pop(op, None)
            if a is None and wait_s > 0:
                try:
                    a = conn.answer(op, wait_s)
                except DriverError as e:
                    self._lost(str(e))
                    return acked
            if a is None:
                continue
            taken = self.written.pop(op)
            if a.code != remoting.SUCCESS:
                self.failed.append(f"{taken} refused (code {a.code}: {a.remark})")
            else:
                acked += taken
        return acked

    def _lost(self, why: str = "the connection was lost before the broker answered") -> None:
        """The connection dropped: acks written on it and not answered are failed."""
        for taken in self.written.values():
            self.failed.append(f"{taken}: {why}")
        self.written = {}
        self.link.drop()

    def close(self) -> None:
        """The pending acks written and answered (at most the request timeout), then
        the connection closed."""
        with self.lock:
            if self.pending or self.pending_count or self.written:
                try:
                    conn = self.link.get()
                    conn.write(self._acks(conn))
                    self._answered(conn, self.margin_s)
                except DriverError as e:
                    LOG.warning("rocketmq: acks at close: %s (their messages come again)", e)
            if self.failed:
                LOG.warning("rocketmq: acks failed at close: %s", "; ".join(self.failed))
            self.link.close()
