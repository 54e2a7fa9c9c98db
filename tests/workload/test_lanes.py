"""Senders in lanes (mqlab.workload.lanes over mqlab._sendpath.Lanes), closed loop and at
a fixed rate, against Redis stand-ins on socket pairs whose replies we delay, refuse or
withhold: what each lane records is what a thread per sender would record (issues 25,
28)."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import hiredis
import pytest
import redis

from mqlab import envelope
from mqlab.archive import codecs, layout
from mqlab.brokers.base import Endpoints, NodeEndpoint
from mqlab.brokers.redis import driver as redis_driver
from mqlab.brokers.redis import sender as redis_sender
from mqlab.brokers.redis import wire as redis_wire
from mqlab.scenario.model import Workload
from mqlab.workload import lanes, threads
from mqlab.workload.recorder import IntervalRecorder
from mqlab.workload.schedules import FixedRate
from mqlab.workload.senderstats import Cuts, SenderStats

pytestmark = pytest.mark.skipif(
    redis_sender._sendpath is None, reason="tests/brokers/test_sendpath.py fails first"
)
SIZE = 100
XADD_OK = b"$15\r\n1700000000000-0\r\n"


class _PairWire(redis_wire.SendWire):
    """The sender's wire with a socket pair's end as its connection; connecting again
    takes ``connect_s`` and fails while ``refuse`` says so."""

    def __init__(self, sock: socket.socket):
        super().__init__(None, 2.0)  # type: ignore[arg-type]
        self.pair_sock = sock
        self.connect_s = 0.0
        self.refuse: Callable[[], bool] = lambda: False
        self.connects = 0

    def _connect(self) -> socket.socket:
        time.sleep(self.connect_s)
        self.connects += 1
        if self.refuse():
            raise redis.ConnectionError("refused")
        if self.connects > 1:  # a new connection: nothing the last one was owed is read
            self.pair_sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while self.pair_sock.recv(1 << 20):
                    pass
            self.pair_sock.setblocking(True)
        self.sock, self.fd = self.pair_sock, self.pair_sock.fileno()
        self.reader = hiredis.Reader(replyError=redis.ResponseError)
        return self.pair_sock

    def reset(self) -> None:
        self.sock, self.fd = None, -1


class Peer:
    """A Redis stand-in for one lane (no WAIT): reads each batch of ``batch`` XADDs whole,
    notes when its first byte came (monotonic ns), and answers after ``delay_s()``, or
    with an error while ``failing()``."""

    def __init__(self, sock: socket.socket, frame: int, batch: int, prefix: int):
        self.sock, self.frame, self.batch, self.prefix = sock, frame, batch, prefix
        self.stamps: list[int] = []  # each batch's first message's intended-send stamp
        self.seqs: list[int] = []  # and its seq
        self.delay_s: Callable[[], float] = lambda: 0.0
        self.failing: Callable[[], bool] = lambda: False
        self.first_byte_ns: list[int] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        buf = b""
        want = self.frame * self.batch
        start = got = 0  # the batch's first byte's offset in what the lane wrote; bytes read
        reads: list[tuple[int, int]] = []  # (bytes read by the end of a read, its time)
        try:
            while True:
                while len(buf) < want:
                    data = self.sock.recv(1 << 20)
                    if not data:
                        return
                    got += len(data)
                    reads.append((got, time.monotonic_ns()))
                    buf += data
                # the read that brought its first byte (several batches may come in one)
                self.first_byte_ns.append(next(t for end, t in reads if end > start))
                start += want
                reads = [r for r in reads if r[0] > start]
                head = buf[self.prefix : self.prefix + envelope.HEADER_BYTES]
                _, seq, stamp = envelope.decode(head + bytes(SIZE))
                self.stamps.append(stamp)
                self.seqs.append(seq)
                buf = buf[want:]
                time.sleep(self.delay_s())
                if self.failing():
                    self.sock.sendall(b"-ERR refused\r\n" * self.batch)
                else:
                    self.sock.sendall(XADD_OK * self.batch)
        except OSError:
            return


@pytest.fixture
def made() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    out: list[tuple[socket.socket, socket.socket]] = []
    yield out
    for a, b in out:
        a.close()
        b.close()


def _lanes(
    made: list[tuple[socket.socket, socket.socket]], n: int, batch: int = 2
) -> tuple[list[lanes.LaneState], list[Peer], envelope.PayloadPool]:
    pool = envelope.PayloadPool(SIZE, pool_size=2, seed=3)
    states, peers = [], []
    for j in range(n):
        a, b = socket.socketpair()
        made.append((a, b))
        settings = redis_driver.Settings(streams=1, wait_replicas=0)
        endpoints = Endpoints("redis", (NodeEndpoint(0, "127.0.0.1", 1),))
        s = redis_sender.RedisSender(redis_driver.RedisDriver(settings, endpoints, "q"))
        s.wire = _PairWire(a)
        s.wire.connected()
        prefix = len(s.heads[s.keys[0]]) + len(b"$%d\r\n" % SIZE)
        peer = Peer(b, prefix + SIZE + 2, batch, prefix)
        peer.thread.start()
        sizes = threads.BatchSizes(random.Random(j), batch, batch, None)
        states.append(
            lanes.LaneState(s, SenderStats(j), sizes, threads.Retry(Workload().error_budget_s))
        )
        peers.append(peer)
    return states, peers, pool


def _drive(
    states: list[lanes.LaneState],
    pool: envelope.PayloadPool,
    seconds: float,
    cuts: Cuts | None = None,
    stop: threading.Event | None = None,
) -> tuple[int, int]:
    start = time.monotonic_ns()
    offset = time.time_ns() - time.monotonic_ns()
    end = start + int(seconds * 1e9)
    lanes.drive(states, pool, stop or threading.Event(), start, end, offset, cuts or Cuts())
    return start, offset


def _latencies_us(stats: SenderStats) -> list[int]:
    call_us, *_ = stats.swap()
    return [int(x) for x in call_us]


def test_a_delayed_reply_is_inside_the_recorded_latency(made: list) -> None:
    states, peers, pool = _lanes(made, 2)
    peers[0].delay_s = lambda: 0.03
    _drive(states, pool, 0.5)
    slow, fast = (_latencies_us(s.stats) for s in states)
    assert slow and min(slow) >= 30_000  # each batch waited 30 ms for its reply
    assert fast and len(fast) > 3 * len(slow)


def test_each_lane_starts_its_batch_before_its_first_byte_reaches_the_peer(made: list) -> None:
    """A batch's start (its header's intended-send stamp) is taken as its own bytes are
    written: never after they reach the peer, whichever lane of the round it is."""
    states, peers, pool = _lanes(made, 4)
    _, offset = _drive(states, pool, 0.3)
    for peer in peers:
        n = min(len(peer.stamps), len(peer.first_byte_ns))
        assert n > 10
        for stamp, first in zip(peer.stamps[:n], peer.first_byte_ns[:n], strict=True):
            assert stamp - offset <= first


def test_lanes_with_unequal_latencies_keep_their_own_pace(made: list) -> None:
    """A slow lane (20 ms a batch) does not hold a fast one (1 ms): the fast one's
    batches follow each other at its own latency, whatever the slow one does."""
    states, peers, pool = _lanes(made, 2)
    peers[0].delay_s = lambda: 0.02
    peers[1].delay_s = lambda: 0.001
    _drive(states, pool, 1.0)
    slow, fast = states[0].stats, states[1].stats
    # Little's law per lane: its batches' latencies add up to (nearly) the time it ran
    busy_fast = sum(fast.call_us) / 1e6
    busy_slow = sum(slow.call_us) / 1e6
    assert busy_fast > 0.8 and busy_slow > 0.8
    assert len(fast.call_us) > 5 * len(slow.call_us)


def test_a_lane_failing_past_its_budget_leaves_every_confirmed_batch_recorded(
    made: list,
) -> None:
    """One lane's sends fail until its error budget runs out (shortened to 0.4 s) while
    the others confirm: the thread fails, after every other lane's confirmed batch was
    recorded and nothing is in flight."""
    states, peers, pool = _lanes(made, 3)
    for state in states:
        state.retry.budget_s = 0.4
    peers[0].failing = lambda: True
    for p in peers[1:]:
        p.delay_s = lambda: 0.002
    with pytest.raises(threads.ThreadFailed):
        _drive(states, pool, 30)
    bad = states[0].stats
    assert bad.confirmed_total == 0 and bad.failed_total > 0
    for state, peer in zip(states[1:], peers[1:], strict=True):
        st = state.stats
        # every batch the peer answered is recorded (none left in flight)
        assert st.confirmed_total == len(peer.first_byte_ns) * 2
        assert st.confirmed_total == len(st.confirmed) and st.failed_total == 0
        assert st.watermark_ms is None


def test_a_reconnect_counts_in_its_batch_and_does_not_hold_the_others(made: list) -> None:
    states, peers, pool = _lanes(made, 2)
    wire = states[0].client.wire  # type: ignore[attr-defined]
    wire.connect_s = 0.2
    fails = iter([True])
    peers[0].failing = lambda: next(fails, False)
    peers[1].delay_s = lambda: 0.001
    _drive(states, pool, 0.6)
    assert wire.connects == 2  # the first, and again after the failure
    slow = _latencies_us(states[0].stats)
    assert slow and max(slow) >= 200_000  # the batch after the failure waited to connect
    fast = states[1].stats
    # the other lane was busy all along: no gap of the reconnect's length
    assert sum(fast.call_us) / 1e6 > 0.45


def test_runs_land_in_the_interval_of_their_confirmation_across_a_tick_and_the_warm_up_end(
    made: list, tmp_path: Path
) -> None:
    """A recorder ticked as the worker ticks it (the ticker waits for the senders'
    watermark): every batch lands in the interval its confirmation fell in, the warm-up
    end (an arbitrary ms) included, as the batches' own records say."""
    states, peers, pool = _lanes(made, 2)
    for p in peers:
        p.delay_s = lambda: 0.003
    now_ms = time.time_ns() // 1_000_000
    rec = IntervalRecorder(tmp_path, "sender", "sender-00", "r", now_ms)
    rec.senders += [s.stats for s in states]
    cuts = Cuts()
    cuts.measure_ms = now_ms + 1337  # the warm-up end
    cut_list = sorted({cuts.measure_ms, *((now_ms // 1000 + k) * 1000 for k in (1, 2))})
    confirms: list[list[int]] = [[] for _ in states]
    orig = SenderStats.confirmed_run

    def keep(self: SenderStats, first: int, sizes, done, records, off) -> None:  # type: ignore[no-untyped-def]
        confirms[self.sender_id] += [(records[2 * i + 1] + off) // 1_000_000 for i in range(done)]
        orig(self, first, sizes, done, records, off)

    SenderStats.confirmed_run = keep  # type: ignore[method-assign]
    stop = threading.Event()
    ticker_done = threading.Event()

    def ticker() -> None:
        for cut in cut_list:
            while time.time_ns() // 1_000_000 < cut:
                time.sleep(0.0005)
            rec.wait_for_records(cut, threads.WATERMARK_WAIT_S)
            rec.tick(cut)
        ticker_done.set()

    t = threading.Thread(target=ticker)
    t.start()
    try:
        _drive(states, pool, (cut_list[-1] - now_ms) / 1000 + 0.2, cuts, stop)
    finally:
        SenderStats.confirmed_run = orig  # type: ignore[method-assign]
        t.join(10)
    rec.tick(time.time_ns() // 1_000_000 + 1)
    rec.close()
    rows, _ = codecs.parse_counts((tmp_path / layout.COUNTS).read_text())
    bounds = [now_ms, *cut_list]
    every = [m for c in confirms for m in c]
    for k in range(len(cut_list)):
        lo, hi = bounds[k], bounds[k + 1]
        want = sum(1 for m in every if lo <= m < hi) * 2
        got = next(r for r in rows if r.start_ms == lo)
        assert got.counts["confirmed"] == want, (k, lo, hi)
        assert got.counts["sent"] == want
    assert any(r.start_ms == cuts.measure_ms for r in rows)


def test_a_failing_lane_backs_off_alone_and_every_message_is_accounted(made: list) -> None:
    """The first 3 batches of one lane fail (its backoff: 0.1 + 0.2 + 0.4 s); the other
    lane sends all its 40 messages meanwhile, and the failed ones' seqs are skipped."""
    states, peers, pool = _lanes(made, 2)
    fails = iter([True, True, True])
    peers[0].failing = lambda: next(fails, False)
    for state in states:
        state.sizes = threads.BatchSizes(random.Random(1), 2, 2, 40)
    _drive(states, pool, 30)
    bad, good = states[0].stats, states[1].stats
    assert (bad.sent_total, bad.failed_total, bad.confirmed_total) == (40, 6, 34)
    assert sorted(bad.confirmed) == list(range(6, 40))
    assert (good.sent_total, good.confirmed_total, good.failed_total) == (40, 40, 0)
    assert good.confirm_ms[-1] < bad.confirm_ms[0]  # all 20 batches before its first


# -- fixed-rate senders in lanes (issue 28) -------------------------------------------------
def _fixed(states: list[lanes.LaneState], rate_per_s: float, start_ns: int) -> list[FixedRate]:
    out = []
    for state in states:
        state.schedule = FixedRate(rate_per_s, start_ns)
        state.stats.schedule = state.schedule
        out.append(state.schedule)
    return out


def _drive_fixed(
    states: list[lanes.LaneState], pool: envelope.PayloadPool, rate: float, seconds: float
) -> tuple[list[FixedRate], int, int, int]:
    """The lanes at ``rate`` msgs/s each from now for ``seconds``: (schedules, start,
    end, wall offset)."""
    start = time.monotonic_ns()
    offset = time.time_ns() - time.monotonic_ns()
    end = start + int(seconds * 1e9)
    schedules = _fixed(states, rate, start)
    lanes.drive(states, pool, threading.Event(), start, end, offset, Cuts())
    return schedules, start, end, offset


def test_fixed_rate_batches_go_at_their_slots_and_are_stamped_with_them(made: list) -> None:
    """Two lanes at 400 msgs/s in batches of 2 (a slot each 5 ms): the peer decodes each
    batch's slot as its stamp (batch k: the slot of message 2k, exactly), and no batch's
    first byte reaches it before that slot; each recorded latency runs from the slot."""
    states, peers, pool = _lanes(made, 2)
    schedules, start, end, offset = _drive_fixed(states, pool, 400.0, 0.5)
    for state, peer, sch in zip(states, peers, schedules, strict=True):
        n = len(peer.stamps)
        assert n >= 10 and n == len(peer.first_byte_ns)
        for k, (stamp, first) in enumerate(zip(peer.stamps, peer.first_byte_ns, strict=True)):
            assert stamp - offset == sch.slot(2 * k) < end
            assert first >= sch.slot(2 * k)  # never before its slot
        st = state.stats
        assert st.confirmed_total == 2 * n == sch.scheduled  # every batch handed was confirmed
        confirmed = [m * 1_000_000 - offset for m in st.confirm_ms]
        for k, (lat_us, conf_ns) in enumerate(zip(st.call_us, confirmed, strict=True)):
            # from the slot to the confirmation (its wall ms, so within a ms)
            assert abs(lat_us * 1000 - (conf_ns - sch.slot(2 * k))) <= 1_000_000 + 1000


def test_a_delayed_reply_does_not_hold_the_batches_due_behind_it(made: list) -> None:
    """Lane 0's peer holds its 3rd reply 150 ms (its lane at 400 msgs/s, a batch each
    5 ms): the batches due meanwhile still go at their slots, in flight behind the held
    one (the lane's window), each stamped with its slot; all are confirmed in order once
    the peer answers, each latency from its slot, so those behind the held one count the
    wait; the lag figure stays far below the 150 ms; lane 1 keeps its slots."""
    states, peers, pool = _lanes(made, 2)
    held = iter([0.0, 0.0, 0.15])
    peers[0].delay_s = lambda: next(held, 0.0)
    schedules, start, end, offset = _drive_fixed(states, pool, 400.0, 0.6)
    sch, peer, st = schedules[0], peers[0], states[0].stats
    assert sch.late_max_ns < 100_000_000  # waiting for the held reply would be >= 145 ms
    assert len(peer.stamps) >= 60
    for k, stamp in enumerate(peer.stamps):
        assert stamp - offset == sch.slot(2 * k)
    assert st.confirmed_total == 2 * len(peer.stamps) == sch.scheduled
    assert sorted(st.confirmed) == list(range(st.confirmed_total))
    # batch 3 (slot 5 ms after batch 2's) was confirmed after the held reply
    assert st.call_us[2] >= 150_000 and st.call_us[3] >= 150_000 - 5_000
    # the peer read batch 3 only after answering batch 2: it had gone long before
    assert peer.first_byte_ns[3] - sch.slot(6) >= 150_000_000 - 5_000_000
    other = schedules[1]
    assert other.late_max_ns < 100_000_000
    for k, stamp in enumerate(peers[1].stamps):
        assert stamp - offset == other.slot(2 * k)


def test_a_full_window_makes_the_next_batches_late_and_recorded_from_their_slots(
    made: list,
) -> None:
    """Lane 0's peer holds its 3rd reply 0.6 s at 200 batches a second: the lane's
    window (``WINDOW`` batches in flight) fills 0.32 s after the held batch's slot, and
    the batches due after that go only as replies make room: late, each stamped with its
    slot, its latency from the slot, every one confirmed in order."""
    window = redis_sender._sendpath.WINDOW  # type: ignore[union-attr]
    assert window == 64
    states, peers, pool = _lanes(made, 1)
    held = iter([0.0, 0.0, 0.6])
    peers[0].delay_s = lambda: next(held, 0.0)
    schedules, start, end, offset = _drive_fixed(states, pool, 400.0, 1.0)
    sch, peer, st = schedules[0], peers[0], states[0].stats
    # due after the window filled: at most 0.6 - 0.32 s late (less the peer's own start)
    assert 150_000_000 <= sch.late_max_ns <= 600_000_000
    for k, stamp in enumerate(peer.stamps):
        assert stamp - offset == sch.slot(2 * k)
    assert st.confirmed_total == 2 * len(peer.stamps) == sch.scheduled
    assert sorted(st.confirmed) == list(range(st.confirmed_total))
    # the first batch that found the window full: 64 behind the held one, slot 2 + 64
    assert st.call_us[2 + window] >= 600_000 - 64 * 5_000 - 5_000


def test_a_failure_fails_the_batches_in_flight_behind_it_and_the_lane_connects_again(
    made: list,
) -> None:
    """Lane 0's peer answers its 3rd batch with an error after 40 ms, the batches due
    meanwhile in flight behind it (a slot each 5 ms): they fail with it (their replies
    not read), their seqs are skipped, the lane connects again after its backoff and
    sends on at its slots; every message due is confirmed, failed or unsent, none twice,
    and none confirmed was failed."""
    states, peers, pool = _lanes(made, 1)
    wire = states[0].client.wire  # type: ignore[attr-defined]
    held = iter([0.0, 0.0, 0.04])
    peers[0].delay_s = lambda: next(held, 0.0)
    answers = iter([False, False, True])
    peers[0].failing = lambda: next(answers, False)
    schedules, start, end, offset = _drive_fixed(states, pool, 400.0, 0.8)
    sch, peer, st = schedules[0], peers[0], states[0].stats
    assert wire.connects == 2
    failed_batches = st.failed_total // 2
    assert failed_batches >= 4  # the held one and those due in its 40 ms behind it
    assert st.confirmed_total + st.failed_total == sch.scheduled
    confirmed = sorted(st.confirmed)
    assert len(set(confirmed)) == len(confirmed)
    lost = set(range(4, 4 + st.failed_total))  # batch 2 (seqs 4, 5) and those behind it
    assert not lost & set(confirmed)
    assert confirmed == [q for q in range(sch.scheduled) if q not in lost]
    # every failed batch went (the peer read it), and the lane went on after them
    assert set(range(4, 4 + st.failed_total, 2)) <= set(peer.seqs)
    assert max(peer.seqs) > 4 + st.failed_total
    for seq, stamp in zip(peer.seqs, peer.stamps, strict=True):
        assert stamp - offset == sch.slot(seq)


class _Given:
    """A driver whose ``sender()`` is a prepared one (a lane on a socket pair)."""

    def __init__(self, sender: object):
        self._sender = sender

    def sender(self) -> object:
        return self._sender


def test_slots_not_sent_by_the_end_are_recorded_unsent_from_their_slots(
    made: list,
) -> None:
    """Through ``run_sender_lanes``: a lane whose peer holds a reply past the end (rate
    400 msgs/s, batches of 2, 0.8 s), so that its window fills, has every slot before
    the end either confirmed or unsent (from the stop), none twice."""
    states, peers, pool = _lanes(made, 2)
    held = iter([0.0, 0.0, 0.0, 1.0])
    peers[0].delay_s = lambda: next(held, 0.0)
    w = Workload(
        mode="fixed_rate", rate_per_s=400.0, duration_s=0.8, send_batch_min=2, send_batch_max=2
    )
    stats = [s.stats for s in states]
    go = threading.Event()
    go.set()
    threads.run_sender_lanes(
        [_Given(s.client) for s in states],  # type: ignore[misc]
        w,
        stats,
        pool,
        [0, 1],
        threading.Event(),
        threading.Barrier(1),
        go,
    )
    for st, peer in zip(stats, peers, strict=True):
        sch = st.schedule
        assert isinstance(sch, FixedRate)
        end = sch.start_ns + 800_000_000
        due = sum(1 for k in range(0, 800, 2) if sch.slot(k) < end) * 2  # 160 slots of 2
        assert st.confirmed_total + st.failed_total + st.unsent_total == due
        assert st.confirmed_total == 2 * len(peer.stamps)
        assert sorted(st.confirmed) == list(range(st.confirmed_total))
        assert all(x >= 0 for x in st.unsent_us)
    slow, fast = stats
    # the slow lane's 4th batch (slot 15 ms) was in flight until after the end, and the
    # 63 behind it: its window full from batch 67 (slot 335 ms) on, the 93 later batches'
    # slots are unsent, each from its slot to the stop
    window = redis_sender._sendpath.WINDOW  # type: ignore[union-attr]
    assert (slow.confirmed_total, slow.unsent_total) == (2 * (3 + window), 2 * (160 - 3 - window))
    sch = slow.schedule
    assert isinstance(sch, FixedRate) and sch.scheduled == 2 * (3 + window)
    lat = sorted(slow.unsent_us, reverse=True)
    assert all(a - b == 2_500 for a, b in zip(lat, lat[1:], strict=False))  # 2.5 ms apart
    assert fast.confirmed_total > 0


def test_the_lag_figure_is_taken_as_of_the_last_return() -> None:
    """A lanes thread brings ``scheduled`` up to date at each return of the compiled
    loop: the lag the ticker reads is as of then (the cut), not as of a later read."""
    sch = FixedRate(1000.0, start_ns=0)
    sch.scheduled = 10  # the next slot: 10 ms
    sch.as_of_ns = 12_000_000
    assert sch.behind_ns(500_000_000) == 2_000_000  # not 490 ms: unknown past the return
    sch.late_max_ns = 3_000_000
    assert sch.behind_max_ns(500_000_000) == 3_000_000
    sch.as_of_ns = None
    assert sch.behind_ns(500_000_000) == 490_000_000


def test_a_fixed_rate_lane_that_failed_reconnects_and_stamps_each_batch_with_its_slot(
    made: list,
) -> None:
    """Lane 0's first batch fails (its backoff 0.1 s, then a connect of 0.1 s): every
    batch the peer gets is stamped with the slot of its first seq (the failed one's seqs
    skipped), the first after the failure's latency counts the backoff and the connect,
    and the other lane keeps its slots meanwhile."""
    states, peers, pool = _lanes(made, 2)
    wire = states[0].client.wire  # type: ignore[attr-defined]
    wire.connect_s = 0.1
    fails = iter([True])
    peers[0].failing = lambda: next(fails, False)
    schedules, start, end, offset = _drive_fixed(states, pool, 200.0, 0.6)
    sch, peer, st = schedules[0], peers[0], states[0].stats
    assert wire.connects == 2 and st.failed_total == 2
    assert peer.seqs[0] == 0 and len(peer.seqs) > 3
    for seq, stamp in zip(peer.seqs, peer.stamps, strict=True):
        assert stamp - offset == sch.slot(seq)
    assert st.confirmed_total == 2 * (len(peer.seqs) - 1)
    # from its slot, 10 ms after the failed one's: the backoff (0.1 s) and the connect (0.1 s)
    assert max(st.call_us) >= 200_000 - 10_000
    for seq, stamp in zip(peers[1].seqs, peers[1].stamps, strict=True):
        assert stamp - offset == schedules[1].slot(seq)
    assert st.confirmed_total + st.failed_total == sch.scheduled


def test_a_signal_stop_wakes_a_waiting_loop_at_once_without_a_watcher(made: list) -> None:
    """The worker's ``stop`` is a :class:`lanes.Signal`: setting it wakes the compiled loop
    through its listener (no thread looks at it on a timer). A fixed-rate lane whose next
    slot is 10 s away ends within 0.1 s of the stop (not at the next second's cut)."""
    states, peers, pool = _lanes(made, 1)
    start = time.monotonic_ns()
    offset = time.time_ns() - time.monotonic_ns()
    _fixed(states, 0.2, start)  # batches of 2: a slot each 10 s
    stop = lanes.Signal()
    names: list[str] = []
    stopped: list[float] = []

    def set_stop() -> None:
        names.extend(t.name for t in threading.enumerate())
        stopped.append(time.monotonic())
        stop.set()

    timer = threading.Timer(0.3, set_stop)
    timer.start()
    lanes.drive(states, pool, stop, start, start + 30_000_000_000, offset, Cuts())
    late = time.monotonic() - stopped[0]
    timer.join()
    assert late < 0.1, late
    assert "lanes-stop" not in names  # no watcher thread
    assert not stop._listeners  # the loop's listener is gone
    assert states[0].stats.confirmed_total == 2 and len(peers[0].stamps) == 1


def test_a_signal_calls_its_listeners_when_set_and_at_once_if_set_already() -> None:
    s = lanes.Signal()
    calls: list[str] = []

    def a() -> None:
        calls.append("a")

    s.listen(a)
    s.set()
    assert calls == ["a"] and s.is_set()
    s.listen(lambda: calls.append("b"))  # set already: called at once
    assert calls == ["a", "b"]
    s.unlisten(a)
    assert len(s._listeners) == 1
