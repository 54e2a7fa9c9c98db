"""The sender thread on a slow broker (a fake driver: this tests mqlab's own logic; the
real brokers run in the integration tests): headers carry the intended send time, and the
messages whose slot passed before the run stopped are recorded as unsent."""

from __future__ import annotations

import array
import itertools
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from mqlab import envelope
from mqlab.brokers.base import Delivery, Sender
from mqlab.scenario.model import Workload
from mqlab.workload.recorder import ReceiverStats
from mqlab.workload.senderstats import SenderStats
from mqlab.workload.threads import (
    BatchSizes,
    Retry,
    ThreadFailed,
    _Lane,
    _ran,
    run_receiver,
    run_sender,
)


class _SlowSender(Sender):
    """Takes ``call_s`` per send() call and keeps (wall ns at the call, message) pairs."""

    def __init__(self, call_s: float):
        self.call_s = call_s
        self.calls: list[tuple[int, bytes]] = []

    def send(self, batch: Sequence[bytes]) -> None:
        now = time.time_ns()
        self.calls += [(now, m) for m in batch]
        time.sleep(self.call_s)


class _Driver:
    def __init__(self, sender: _SlowSender):
        self._sender = sender

    def sender(self) -> Sender:
        return self._sender


def _run(w: Workload, client: _SlowSender) -> SenderStats:
    stats = SenderStats(0)
    go = threading.Event()
    go.set()
    driver: Any = _Driver(client)
    run_sender(
        driver, w, stats, envelope.PayloadPool(64), 1, threading.Event(), threading.Barrier(1), go
    )
    return stats


def test_a_sender_behind_its_schedule_stamps_intended_times_and_counts_unsent() -> None:
    # 200 msg/s scheduled against a broker that takes 20 ms a message (50 msg/s)
    w = Workload(
        message_bytes=64,
        send_batch_min=1,
        send_batch_max=1,
        mode="fixed_rate",
        rate_per_s=200.0,
        duration_s=1.5,
    )
    client = _SlowSender(0.02)
    stats = _run(w, client)
    calls = client.calls
    assert 40 <= len(calls) <= 80
    slot0 = envelope.decode(calls[0][1])[2]
    for k, (_called_ns, msg) in enumerate(calls):
        _sender, seq, stamp = envelope.decode(msg)
        # the stamp is slot k (5 ms after the previous one), not when send() was called
        assert seq == k and abs(stamp - (slot0 + k * 5_000_000)) < 1_000
    behind_ms = (calls[-1][0] - envelope.decode(calls[-1][1])[2]) / 1e6
    assert behind_ms > 700  # the last one went out ~1 s after its slot
    # every slot before the 1.5 s end is accounted for: sent or unsent, none dropped
    assert stats.sent_total + stats.unsent_total == 300
    assert stats.unsent_total >= 200
    unsent = np.frombuffer(stats.unsent_us, dtype=np.int64)
    assert unsent.size == stats.unsent_total
    assert unsent.max() > 1_000_000 and unsent.min() >= 0  # slot 0.5 s waited ~1 s: in us


def test_closed_loop_stamps_the_batch_start_and_never_reports_unsent() -> None:
    w = Workload(message_bytes=64, send_batch_min=3, send_batch_max=3, messages_per_thread=30)
    client = _SlowSender(0.001)
    stats = _run(w, client)
    assert stats.sent_total == stats.confirmed_total == 30 and stats.unsent_total == 0
    for called_ns, msg in client.calls:
        assert 0 <= called_ns - envelope.decode(msg)[2] < 50_000_000


def _drawn_one_by_one(seed: int, lo: int, hi: int, limit: int) -> list[int]:
    """The batch sizes as a sender drew them one at a time before runs existed."""
    rng, out, seq = random.Random(seed), [], 0
    while seq < limit:
        n = min(lo + int(rng.random() * (hi - lo + 1)), limit - seq)
        out.append(n)
        seq += n
    return out


def test_batch_sizes_come_in_the_same_order_whether_taken_in_runs_or_one_by_one() -> None:
    want = _drawn_one_by_one(5, 1, 9, 1000)
    runs = BatchSizes(random.Random(5), 1, 9, 1000)
    got: list[int] = []
    for k, used in itertools.cycle([(7, 3), (64, 64), (5, 0), (2, 1)]):
        run = runs.take(k)
        if not run:
            break
        got += run[:used]
        runs.used(min(used, len(run)))
    assert got == want and sum(got) == 1000
    one = BatchSizes(random.Random(5), 1, 9, 1000)
    assert list(iter(one.next, 0)) == want
    fixed = BatchSizes(random.Random(5), 4, 4, 10)
    assert list(fixed.take(64)) == [4, 4, 2]


def test_a_run_is_recorded_as_its_batches_one_by_one_would_be() -> None:
    sizes = array.array("q", [3, 5, 2, 4])
    offset = 1_700_000_000_000_000_000 - 5_000_000  # wall second boundary in the run
    records = array.array("q", [0, 900_000, 1_000_000, 2_000_000, 5_100_000, 7_000_000])
    records += array.array("q", [7_000_000, 9_999_000])
    by_run, by_batch = SenderStats(1), SenderStats(1)
    by_run.confirmed_run(40, sizes, 3, records, offset)  # the 4th batch is not done
    seq = 40
    for i in range(3):
        start, end = records[2 * i], records[2 * i + 1]
        by_batch.sending(sizes[i], start, seq, (start + offset) // 1_000_000)
        by_batch.confirmed_batch(seq, sizes[i], (end - start) // 1000, (end + offset) // 1_000_000)
        seq += sizes[i]
    for a, b in ((by_run, by_batch),):
        assert a.marks == b.marks == [[1_699_999_999_000, 40], [1_700_000_000_000, 48]]
        assert list(a.call_us) == list(b.call_us) == [900, 1000, 1900]
        assert list(a.batch_sizes) == list(b.batch_sizes) == [3, 5, 2]
        assert a.confirmed == b.confirmed and len(a.confirmed) == 10
        assert (a.sent_total, a.confirmed_total) == (b.sent_total, b.confirmed_total) == (10, 10)
        assert a.last_confirm_ms == b.last_confirm_ms


def test_a_fixed_rate_run_is_recorded_from_its_slots_and_marked_when_sent() -> None:
    """A fixed-rate lane's run: each latency from its batch's slot (``intended``) to its
    confirmation; which second a batch went out in is from when it was written."""
    sizes = array.array("q", [1, 1, 1])
    offset = 1_700_000_000_000_000_000 - 5_000_000
    slots = array.array("q", [0, 4_000_000, 4_500_000])
    records = array.array("q", [100, 900_000, 4_000_000, 5_000_000, 5_000_000, 6_000_000])
    st = SenderStats(1)
    st.confirmed_run(7, sizes, 3, records, offset, slots)
    assert list(st.call_us) == [900, 1000, 1500]  # the last one went 0.5 ms late
    # the 3rd was due before the second changed but written after it
    assert st.marks == [[1_699_999_999_000, 7], [1_700_000_000_000, 9]]
    assert list(st.confirm_ms) == [(e + offset) // 1_000_000 for e in records[1::2]]
    assert st.last_confirm_ms == (6_000_000 + offset) // 1_000_000


class _LaneSender(Sender):
    """Senders driven together (a fake of a driver's lanes: mqlab's own loop is tested);
    ``fail_first`` sends of the one whose ``name`` is "bad" fail."""

    def __init__(self, name: str, fail_first: int = 0):
        self.name, self.fail_left = name, fail_first
        self.seqs: list[int] = []
        self.sent_at: list[float] = []

    def send(self, batch: Sequence[bytes]) -> None:
        if self.fail_left:
            self.fail_left -= 1
            raise RuntimeError(f"{self.name}: refused")
        self.seqs += [envelope.decode(m)[1] for m in batch]
        self.sent_at.append(time.monotonic())
        time.sleep(0.0005)


def test_a_failure_after_confirmed_batches_in_a_run_is_the_first_in_a_row() -> None:
    """As a batch at a time: a success resets the backoff, so a sender whose runs each
    confirm some batches and then fail one is never failed for failing 30 s in a row."""
    sizes = BatchSizes(random.Random(1), 2, 2, None)
    lane = _Lane(_LaneSender("x"), SenderStats(0), sizes, Retry(Workload().error_budget_s))
    for _ in range(3):
        lane.run = lane.sizes.take(4)
        lane.records[:8] = array.array("q", [1, 2, 3, 4, 5, 6, 7, 8])
        _ran(lane, 2, RuntimeError("refused"), 0)
        assert lane.retry.errors == 1
    lane.run = lane.sizes.take(4)
    _ran(lane, 0, RuntimeError("refused"), 0)
    assert lane.retry.errors == 2  # no batch confirmed in between: a second in a row
    assert (lane.stats.confirmed_total, lane.stats.failed_total, lane.seq) == (12, 8, 20)


class _DownReceiver:
    """Fails every receive() for ``down_s`` (a broker with no leader), then hands out one
    message per call and keeps the acks."""

    def __init__(self, down_s: float):
        self.until = time.monotonic() + down_s
        self.failures = 0
        self.acked: list[int] = []
        self.seq = itertools.count()

    def receive(self, max_messages: int, wait_s: float) -> list[Delivery]:
        if time.monotonic() < self.until:
            self.failures += 1
            raise ConnectionError("no leader")
        time.sleep(0.01)
        seq = next(self.seq)
        return [Delivery(envelope.encode(7, seq, time.time_ns(), bytes(40)), seq)]

    def ack(self, batch: Sequence[Delivery]) -> None:
        self.acked += [d.handle for d in batch]

    def close(self) -> None:
        pass


def _receive_through(down_s: float, budget_s: float) -> tuple[_DownReceiver, ReceiverStats]:
    client = _DownReceiver(down_s)
    driver: Any = type("D", (), {"receiver": lambda self: client})()
    stats, stop = ReceiverStats(), threading.Event()
    timer = threading.Timer(down_s + 0.5, stop.set)
    timer.start()
    try:
        run_receiver(driver, Workload(error_budget_s=budget_s), stats, stop, threading.Barrier(1))
    finally:
        timer.cancel()
    return client, stats


def test_a_receiver_outlasts_an_outage_shorter_than_its_error_budget() -> None:
    client, stats = _receive_through(down_s=1.5, budget_s=3.0)
    assert client.failures >= 3  # it kept calling through the outage, backing off
    assert client.acked and stats.received_total == stats.acked_total == len(client.acked)


def test_a_receiver_gives_up_once_an_outage_outlasts_its_error_budget() -> None:
    with pytest.raises(ThreadFailed, match=r"receive failing for 1 s \(workload.error_budget_s\)"):
        _receive_through(down_s=3.0, budget_s=1.0)
