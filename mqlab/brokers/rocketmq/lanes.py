"""RocketMQ receivers in lanes (the driver's ``receive_lanes``, with ``client =
"remoting"``): every receiver of a worker on its own connection to the group's master
(``direct.DirectReceiver``'s), all driven from one thread, as RocketMQ's own push
consumer drives its pulls, instead of a thread each handing the interpreter lock to the
others once a batch.

Each lane keeps one POP_MESSAGE of ``read_ahead`` (at most 32) in flight, long-polling
at most ``POLL_CAP_MS`` and never past the call's end. When its answer comes, its
messages are recorded at once (each one's header cut from the answer, the pop split into
batches of at most ``max_messages``, those the broker delivered before flagged; no object
or receipt per message: ``popping.popped_headers``, in C where built) and acked by one
BATCH_ACK_MESSAGE, its entries made as the answer is read, written together with the
lane's next pop (its header's JSON written once per lane: ``popping.PopFrames``); the
acks' answers are read as they come. At the end (``until_ns``, or ``wake_fd`` readable)
no pop is started, those in flight are awaited (their poll ends by then), what they
brought is recorded and acked, and every ack's answer awaited: what the call returns is
acked unless its lane failed. A failed lane (an answer refused, a connection lost, no
answer in time) stops there with the error; what it popped and did not get acked comes
again once its invisible time ends, flagged.
"""

from __future__ import annotations

import itertools
import selectors
import time
from collections.abc import Sequence

from mqlab import envelope
from mqlab.brokers.base import LaneReceipt, ReceiptTally, Receiver
from mqlab.brokers.rocketmq import popping, remoting
from mqlab.brokers.rocketmq.direct import MAX_POP, DirectReceiver
from mqlab.errors import DriverError

POLL_CAP_MS = 500  # a pop's long poll at most (the threaded receiver's too: receive's 0.5 s)


class _Lane(ReceiptTally):
    """One receiver's part of a call: its pop in flight and what it got."""

    def __init__(self, r: DirectReceiver):
        super().__init__()
        self.r = r
        self.pops = popping.PopFrames(r.group, r.topic, r.invisible_ms)
        self.conn: remoting.Connection | None = None
        self.watched = False  # its connection is in the call's selector (no timeout)
        self.timeout: float | None = None  # its socket's timeout, while watched
        self.op: int | None = None  # the pop in flight
        self.due_ns = 0  # its answer's deadline


def receive_lanes(
    receivers: Sequence[Receiver],
    max_messages: int,
    until_ns: int,
    wall_offset_ns: int,
    wake_fd: int,
) -> list[LaneReceipt]:
    """See the top of the module; a receipt per receiver, in their order."""
    lanes = []
    for r in receivers:
        if not isinstance(r, DirectReceiver):
            raise TypeError(f"rocketmq: receive_lanes takes the remoting client's receivers: {r!r}")
        lanes.append(_Lane(r))
    sel = selectors.DefaultSelector()
    try:
        sel.register(wake_fd, selectors.EVENT_READ, None)
        batch = max(1, max_messages)
        for lane in lanes:
            _start(lane, sel, batch, wall_offset_ns)
        _drive(lanes, sel, batch, until_ns, wall_offset_ns, wake_fd)
        for lane in lanes:
            _finish(lane, sel)
    finally:
        for lane in lanes:  # after an error: each socket's timeout back
            _unwatch(lane, sel)
        sel.close()
    return [lane.receipt() for lane in lanes]


def _start(lane: _Lane, sel: selectors.BaseSelector, batch: int, wall_offset_ns: int) -> None:
    """The lane's connection; what its receiver read ahead outside lanes (handed out here,
    acked with the first pop)."""
    r = lane.r
    with r.lock:
        if r.ahead:
            held = list(r.ahead)
            r.ahead.clear()
            hb = envelope.HEADER_BYTES
            got = popping.PoppedHeaders(
                b"".join(m.body[:hb] for m in held if len(m.body) >= hb),
                len(held),
                [i for i, m in enumerate(held) if len(m.body) < hb],
                [i for i, m in enumerate(held) if m.redelivered],
                {},
            )
            _record(lane, got, batch, time.monotonic_ns() + wall_offset_ns)
            r.pending += held
        if r.link.stale():
            r._lost("its broker is no longer the master")
        try:
            lane.conn = r.link.get()
        except DriverError as e:
            lane.error = DriverError(f"rocketmq: receive failed: {e}")
            return
    sel.register(lane.conn.sock, selectors.EVENT_READ, lane)
    lane.watched = True
    # no timeout while watched: with one, Python polls the socket before each recv and
    # send, once more than the selector does (the timeout is back once unwatched)
    lane.timeout = lane.conn.sock.gettimeout()
    lane.conn.sock.setblocking(False)


def _drive(
    lanes: list[_Lane],
    sel: selectors.BaseSelector,
    batch: int,
    until_ns: int,
    wall_offset_ns: int,
    wake_fd: int,
) -> None:
    """Pops until ``until_ns`` or the wake fd, then until none is in flight."""
    ending = False
    while True:
        now = time.monotonic_ns()
        if now >= until_ns and not ending:
            ending = True
            sel.unregister(wake_fd)  # nothing more to wake for
        if not ending:
            for lane in lanes:
                if lane.op is None and lane.error is None:
                    _pop(lane, sel, batch, now, until_ns)
        waiting = [lane for lane in lanes if lane.op is not None]
        if not waiting and (ending or all(lane.error is not None for lane in lanes)):
            return
        wait_ns = min((lane.due_ns for lane in waiting), default=until_ns) - now
        if not ending:
            wait_ns = min(wait_ns, until_ns - now)
        ready = sel.select(max(0.0, wait_ns / 1e9))
        now = time.monotonic_ns()
        for key, _ in ready:
            lane = key.data
            if lane is None:  # the wake fd: it stays readable (the caller drains it), so
                ending = True  # it is watched no more, or each select would return at once
                sel.unregister(wake_fd)
            elif lane.error is None:
                _read(lane, sel, batch, now + wall_offset_ns)
        for lane in waiting:
            if lane.op is not None and lane.error is None and now >= lane.due_ns:
                _fail(lane, sel, "no answer to a pop in time", lost=True)


def _pop(lane: _Lane, sel: selectors.BaseSelector, batch: int, now: int, until_ns: int) -> None:
    """The lane's next pop, its receiver's pending acks written before it; none when less
    than a millisecond is left."""
    poll_ms = min(POLL_CAP_MS, (until_ns - now) // 1_000_000)
    if poll_ms < 1 or lane.conn is None:
        return
    r = lane.r
    n = min(max(batch, r.read_ahead), MAX_POP)
    try:
        op = lane.conn.next_opaque()
        _write(lane.conn, r._acks(lane.conn) + lane.pops.frame(n, int(poll_ms), op), lane.timeout)
    except DriverError as e:
        _fail(lane, sel, str(e), lost=True)
        return
    lane.op = op
    lane.due_ns = now + poll_ms * 1_000_000 + int(r.margin_s * 1e9)


def _read(lane: _Lane, sel: selectors.BaseSelector, batch: int, wall_ns: int) -> None:
    """What the lane's connection has: the acks' answers, and the pop's answer if it came
    (recorded; its messages acked with the next pop, or at the end)."""
    conn = lane.conn
    assert conn is not None
    try:
        chunk = conn.sock.recv(remoting.RECV_CHUNK)
    except BlockingIOError:
        return
    except OSError as e:
        _fail(lane, sel, f"{conn.where()}: {e}", lost=True)
        return
    if not chunk:
        _fail(lane, sel, f"{conn.where()} closed the connection", lost=True)
        return
    conn.buf += chunk
    r = lane.r
    try:
        conn.buffered()
        lane.acked += r._answered(conn)
    except DriverError as e:
        _fail(lane, sel, str(e), lost=True)
        return
    if lane.op is None or lane.op not in conn.early:
        return
    answer = conn.early.pop(lane.op)
    lane.op = None
    if answer.code in remoting.NOTHING_POPPED or answer.code == remoting.POLLING_FULL:
        return
    if answer.code != remoting.SUCCESS:
        why = f"refused by {conn.where()} (code {answer.code}: {answer.remark})"
        _fail(lane, sel, why, lost=answer.code not in remoting.MASTER_STILL)
        return
    try:
        got = popping.popped_headers(answer, r.group, envelope.HEADER_BYTES)
    except DriverError as e:
        _fail(lane, sel, str(e), lost=True)
        return
    _record(lane, got, batch, wall_ns)
    r.pend(got)


def _record(lane: _Lane, got: popping.PoppedHeaders, batch: int, wall_ns: int) -> None:
    """A pop's messages: their headers (a body shorter than one is counted short), in
    batches of at most ``batch``, those delivered before flagged."""
    first = len(lane.headers) // envelope.HEADER_BYTES  # the pop's first header's index
    lane.headers += got.headers
    n = got.messages
    if got.short:  # kept headers renumbered: a short message has none
        short = set(got.short)
        kept_at = list(itertools.accumulate(i not in short for i in range(n)))
        lane.flagged.extend(first + kept_at[i] - 1 for i in got.redelivered if i not in short)
    else:
        lane.flagged.extend(first + i for i in got.redelivered)
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        kept = stop - start - sum(start <= i < stop for i in got.short)
        if kept:
            lane.recv_ns.append(wall_ns)
            lane.lens.append(kept)
    lane.short += len(got.short)
    lane.received += n


def _fail(lane: _Lane, sel: selectors.BaseSelector, why: str, *, lost: bool) -> None:
    """The lane stops with ``why``; ``lost``: its connection is dropped (acks written on
    it and unanswered failed; the next call looks the master up again), else kept for
    the lane's acks at the end (a busy master's refusal)."""
    lane.op = None
    lane.error = DriverError(f"rocketmq: receive failed: {why}")
    _unwatch(lane, sel)
    if lost and lane.conn is not None:
        lane.r._lost(why)
        lane.conn = None


def _unwatch(lane: _Lane, sel: selectors.BaseSelector) -> None:
    if lane.watched and lane.conn is not None:
        sel.unregister(lane.conn.sock)
        lane.conn.sock.settimeout(lane.timeout)
    lane.watched = False


def _write(conn: remoting.Connection, data: bytes, timeout: float | None) -> None:
    """``data`` on a watched connection (no timeout): what its socket's buffer does not
    take at once is written with ``timeout``, as on any other connection."""
    try:
        sent = conn.sock.send(data)
    except BlockingIOError:
        sent = 0
    except OSError as e:
        raise DriverError(f"rocketmq: {conn.where()}: {e}") from e
    if sent < len(data):
        conn.sock.settimeout(timeout)
        try:
            conn.write(data[sent:])
        finally:
            conn.sock.setblocking(False)


def _finish(lane: _Lane, sel: selectors.BaseSelector) -> None:
    """The lane's pending acks written and every ack's answer awaited (at most the
    request timeout); acks that failed, now or in an earlier call, are its error."""
    r = lane.r
    conn = lane.conn
    if conn is not None:
        _unwatch(lane, sel)
        lane.conn = None
        with r.lock:
            try:
                acks = r._acks(conn)
                if acks:
                    conn.write(acks)
                lane.acked += r._answered(conn, r.margin_s)
            except DriverError as e:
                r._lost(str(e))
    if r.failed:
        failed, r.failed = r.failed, []
        if lane.error is None:
            lane.error = DriverError(
                f"rocketmq: {len(failed)} acks failed (their messages come again): {failed[0]}"
            )
