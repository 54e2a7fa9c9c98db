"""The driver contract: every driver, on its real local server, behaves as a queue.

send returns once confirmed; receive hides deliveries from other receivers until
acked or timed out; ack removes; a receiver that dies unacked gets its messages
delivered again (at least once); batch sizes are respected; setup is idempotent.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from mqlab.drivers.base import Delivery, Driver
from mqlab.workload import envelope
from tests.integration.drivers.targets import Target

pytestmark = pytest.mark.integration


def _messages(n: int, sender: int = 7, size: int = 100) -> list[bytes]:
    pool = envelope.PayloadPool(size, seed=1)
    return envelope.encode_batch(sender, 0, n, time.time_ns(), pool)


def _drain(
    receiver: Any, want: int, timeout_s: float = 15.0, max_n: int = 10, ack: bool = True
) -> list[Delivery]:
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        batch = receiver.receive(max_n, 0.5)
        assert len(batch) <= max_n
        if ack and batch:
            receiver.ack(batch)
        got.extend(batch)
    return got


def _seqs(deliveries: list[Delivery]) -> list[int]:
    return [envelope.decode(d.payload)[1] for d in deliveries]


def test_round_trip(contract: tuple[Driver, Target]) -> None:
    driver, _ = contract
    sent = _messages(25)
    s, r = driver.sender(), driver.receiver()
    try:
        for i in range(0, 25, 5):
            s.send(sent[i : i + 5])
        got = _drain(r, 25)
        assert sorted(d.payload for d in got) == sorted(sent)
        assert r.receive(10, 0.5) == []  # acked: nothing left
    finally:
        s.close()
        r.close()


def test_batch_sizes_respected(contract: tuple[Driver, Target]) -> None:
    driver, _ = contract
    s, r = driver.sender(), driver.receiver()
    try:
        s.send(_messages(10))
        got: list[Delivery] = []
        deadline = time.monotonic() + 15
        while len(got) < 10 and time.monotonic() < deadline:
            batch = r.receive(3, 0.5)
            assert len(batch) <= 3
            r.ack(batch)
            got.extend(batch)
        assert sorted(_seqs(got)) == list(range(10))
    finally:
        s.close()
        r.close()


def test_no_delivery_to_two_receivers_at_once(contract: tuple[Driver, Target]) -> None:
    driver, target = contract
    s, r1, r2 = driver.sender(), driver.receiver(), driver.receiver()
    try:
        s.send(_messages(20))
        seen1: list[int] = []
        seen2: list[int] = []
        start = time.monotonic()
        # alternate receivers without acking, well inside the visibility timeout
        while len(seen1) + len(seen2) < 20 and time.monotonic() - start < target.visibility_s * 0.6:
            seen1 += _seqs(r1.receive(4, 0.2))
            seen2 += _seqs(r2.receive(4, 0.2))
        assert not set(seen1) & set(seen2), "a message was handed to two receivers at once"
        assert len(seen1) == len(set(seen1)) and len(seen2) == len(set(seen2))
        assert seen1 or seen2
    finally:
        for c in (s, r1, r2):
            c.close()


def test_unacked_messages_of_a_dead_receiver_are_redelivered(
    contract: tuple[Driver, Target],
) -> None:
    driver, target = contract
    s, dying = driver.sender(), driver.receiver()
    s.send(_messages(5))
    taken = _drain(dying, 5, ack=False)
    assert sorted(_seqs(taken)) == list(range(5))
    dying.close()  # dies without acking
    survivor = driver.receiver()
    try:
        again = _drain(survivor, 5, timeout_s=target.visibility_s * 3 + 10)
        assert sorted(_seqs(again)) == list(range(5))
        if target.reports_redelivery:
            assert all(d.redelivered for d in again)
        time.sleep(target.visibility_s + 0.5)
        assert survivor.receive(10, 0.5) == []  # acked ones do not come back
    finally:
        s.close()
        survivor.close()


def test_setup_is_idempotent(contract: tuple[Driver, Target]) -> None:
    driver, _ = contract
    s = driver.sender()
    s.send(_messages(3))
    driver.setup()  # again: changes nothing, loses nothing
    r = driver.receiver()
    try:
        assert sorted(_seqs(_drain(r, 3))) == [0, 1, 2]
    finally:
        s.close()
        r.close()


def test_server_versions_reported(contract: tuple[Driver, Target]) -> None:
    driver, _ = contract
    versions = driver.server_versions()
    assert versions and all(isinstance(v, str) and v for v in versions)
