"""The Artemis driver on the local Artemis cluster: what the contract suite does not reach.
The broker holds a receiver's read-ahead to its byte window (``prefetch`` messages) and
counts them in flight; a send that the broker does not confirm (its primary paused) fails after
``receipt_timeout_s``, and the same sender carries on once the broker answers again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mqlab import envelope
from mqlab.brokers.artemis.driver import ArtemisDriver, Settings
from mqlab.brokers.base import Delivery
from mqlab.errors import DriverError
from tests.brokers.test_contract import _messages
from tests.conftest import SharedLab

pytestmark = pytest.mark.integration


def _driver(shared_lab: SharedLab, **settings: Any) -> ArtemisDriver:
    cluster = shared_lab.cluster("artemis")
    s = Settings(**{"receipt_timeout_s": 10.0, **settings})
    return ArtemisDriver(s, cluster.endpoints(), f"artemis_{uuid.uuid4().hex[:10]}")


@pytest.fixture
def prefetch_3(shared_lab: SharedLab) -> Iterator[ArtemisDriver]:
    driver = _driver(shared_lab, prefetch=3)
    driver.setup()
    yield driver
    driver.teardown()


def _wait_in_flight(driver: ArtemisDriver, want: int) -> int:
    """remaining().in_flight once it is ``want`` (the broker dispatches asynchronously),
    or what it is after 10 s."""
    deadline = time.monotonic() + 10
    while (rem := driver.remaining()).in_flight != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return int(rem.in_flight or 0)


def test_the_broker_sends_a_receiver_prefetch_messages_ahead(prefetch_3: ArtemisDriver) -> None:
    s = prefetch_3.sender()
    # 1000-byte bodies: about window_bytes_per_message (1048) each as Artemis counts them,
    # so that its byte window of prefetch x 1048 holds 3 messages
    s.send(_messages(10, size=1000))
    s.close()
    r = prefetch_3.receiver()
    try:
        # before any receive(): the broker dispatched 3 (prefetch) and holds them in flight
        assert _wait_in_flight(prefetch_3, 3) == 3
        assert prefetch_3.remaining().count == 10
        got: list[Delivery] = r.receive(10, 5.0)
        assert 1 <= len(got) <= 3  # only what was pushed ahead is handed out at once
        r.ack(got)
        # acked: the broker tops the read-ahead up to 3 again, never beyond
        assert _wait_in_flight(prefetch_3, 3) == 3
        assert prefetch_3.remaining().count == 10 - len(got)
        deadline = time.monotonic() + 15
        while len(got) < 10 and time.monotonic() < deadline:
            batch = r.receive(10, 0.5)
            assert len(batch) <= 3
            r.ack(batch)
            got += batch
        assert sorted(envelope.decode(d.payload)[1] for d in got) == list(range(10))
        assert prefetch_3.remaining().count == 0
    finally:
        r.close()


def test_an_unconfirmed_send_fails_after_the_receipt_timeout(shared_lab: SharedLab) -> None:
    cluster = shared_lab.cluster("artemis")
    driver = _driver(shared_lab, receipt_timeout_s=1.0)
    driver.setup()
    s = driver.sender()
    master = cluster.leader(driver)
    try:
        s.send(_messages(2))  # connected and confirmed
        cluster.pause_node(master)  # the master stops answering, its lock still held
        start = time.monotonic()
        with pytest.raises(DriverError, match="receipts missing after 1.0 s"):
            s.send(_messages(3, sender=8))
        took = time.monotonic() - start
        assert 1.0 <= took < 5.0, took
    finally:
        cluster.resume_node(master)
    try:
        s.send(_messages(1, sender=9))  # the same connection, answered again
        # the failed send's messages were stored after all (at least once): all 6 are there
        deadline = time.monotonic() + 10
        while (rem := driver.remaining()).count != 6 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert rem.count == 6
    finally:
        s.close()
        driver.teardown()
