"""The sender thread on a slow broker (a fake driver: this tests mqlab's own logic; the
real brokers run in tests/integration): headers carry the intended send time, and the
messages whose slot passed before the run stopped are recorded as unsent."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from mqlab.drivers.base import Sender
from mqlab.scenario import Workload
from mqlab.workload import envelope
from mqlab.workload.recorder import SenderStats
from mqlab.workload.threads import run_sender


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
